//! Binds the per-call work of `kstate.spark.processor.state_variables`: each state call a processor makes
//! is one native call here (read the store, check the expiry prefix, decode; or check, encode
//! and stage), on the task's `KeyValueStore` directly.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use kstate_core::spark::decoded_values::{DecodedValues, Lookup};
use kstate_core::spark::state_layout::{self as layout, NO_EXPIRY};
use kstate_core::spark::state_read_ahead::{Entry, PrefixEntries, READ_AHEAD_MAX_BYTES};
use kstate_core::spark::ttl_sweep::{sweep_expired, SweptStore};
use kstate_core::{Direction, KeyRange};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyIterator, PyList, PyString, PyTuple};
use smallvec::SmallVec;

use crate::errors::{detached, guard, raise, to_py, ErrorClass};
use crate::key_value_store::{packed_writes, NativeKeyValueStore, PackedArray};
use crate::row_codec::{decode_row, RowCodec, RowReader};

/// The pickle protocol of pickled state (`state_variables.PickleCodec`).
const PICKLE_PROTOCOL: u8 = 4;

/// `visit` of the entries of a list or map variable under `prefix`, as `(suffix, stored)` in key
/// order: the batch's read-ahead's when it holds the prefix, else one prefix scan of the store.
fn with_entries_under<R>(
    store: &Bound<'_, NativeKeyValueStore>,
    ahead: Option<&Bound<'_, StateReadAhead>>,
    prefix: &[u8],
    visit: impl FnOnce(&[Entry]) -> PyResult<R>,
) -> PyResult<R> {
    let ahead = ahead.map(Bound::try_borrow).transpose()?;
    if let Some(entries) = ahead.as_deref().and_then(|a| a.entries.entries(prefix)) {
        return visit(entries);
    }
    let scanned = {
        let store = store.try_borrow()?;
        let range = KeyRange::prefix(prefix);
        guard(|| {
            store
                .logged
                .inner
                .store
                .scan(&range, Direction::Forward, usize::MAX)
        })?
    };
    let entries: Vec<Entry> = scanned
        .into_iter()
        .map(|(key, stored)| (key[prefix.len()..].into(), stored.into()))
        .collect();
    visit(&entries)
}

/// One micro-batch's entries of a list or map variable for the batch's grouping keys, read
/// ahead in one scan (`kstate_core::spark::state_read_ahead`); the codec's calls given it read
/// from it and keep it in step with what they stage, and it keeps the committed values of the
/// keys they write for the batch's undo.
#[pyclass(module = "kstate._core")]
#[derive(Default)]
pub struct StateReadAhead {
    entries: PrefixEntries,
    /// The store read (its Python object's address): the kept values are that store's.
    store: Option<usize>,
    /// Whether to keep the committed values of the keys written (a commit takes them).
    keep_committed: bool,
}

#[pymethods]
impl StateReadAhead {
    #[new]
    #[pyo3(signature = (keep_committed=false))]
    fn new(keep_committed: bool) -> Self {
        Self {
            keep_committed,
            ..Self::default()
        }
    }

    /// Reads every entry of `store` under the prefixes of `keys` (pickled grouping keys),
    /// replacing what was held; no keys: holds nothing more (the committed values kept for
    /// the undo stay until `forget`).
    fn read(
        &mut self,
        store: &Bound<'_, NativeKeyValueStore>,
        keys: Vec<Bound<'_, PyBytes>>,
    ) -> PyResult<()> {
        if keys.is_empty() {
            self.entries.clear();
            return Ok(());
        }
        let address = store.as_ptr() as usize;
        if self.store.is_some_and(|read| read != address) {
            self.entries.forget();
        }
        self.store = Some(address);
        // Every key's prefix in one buffer: a batch reads ahead up to every key of a partition.
        let mut buffer = Vec::with_capacity(keys.iter().map(|k| k.as_bytes().len() + 4).sum());
        let mut ends = Vec::with_capacity(keys.len());
        for key in &keys {
            layout::push_key_prefix(key.as_bytes(), &mut buffer).map_err(to_py)?;
            ends.push(buffer.len());
        }
        let starts = std::iter::once(0).chain(ends.iter().copied());
        let prefixes: Vec<&[u8]> = starts.zip(&ends).map(|(s, &e)| &buffer[s..e]).collect();
        let store = store.try_borrow()?;
        let entries = &mut self.entries;
        let keep = self.keep_committed;
        guard(|| {
            entries.reread(
                &store.logged.inner.store,
                &prefixes,
                READ_AHEAD_MAX_BYTES,
                keep,
            )
        })
    }

    /// Drops everything held, the kept committed values too.
    fn forget(&mut self) {
        self.entries.forget();
        self.store = None;
    }

    /// The sequence of the list's next entry under `prefix`, or `None` if not held.
    fn next_sequence(&self, prefix: &[u8]) -> PyResult<Option<u64>> {
        self.entries
            .next_sequence(prefix)
            .transpose()
            .map_err(to_py)
    }

    /// What `store.previous_values_of_staged(large)` returns (the keys with staged writes and
    /// their committed values), taking the committed values this read-ahead kept instead of
    /// reading them again; a store it did not read answers by itself.
    fn previous_values_of_staged<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        large: bool,
    ) -> PyResult<(PackedArray<'py>, PackedArray<'py>)> {
        let not_read_ahead = self.store != Some(store.as_ptr() as usize);
        let mut store = store.try_borrow_mut()?;
        let store = &mut store.logged.inner.store;
        let entries = &self.entries;
        let (staged, _) = store.uncommitted();
        packed_writes(py, large, staged, |visit| {
            if not_read_ahead {
                store.previous_values_of_staged(visit)
            } else {
                entries.previous_values_of_staged(store, visit)
            }
        })
    }

    /// How many committed values it keeps for the undo.
    fn kept_values(&self) -> usize {
        self.entries.kept_values()
    }

    /// Stages `key -> stored` (`None`: a delete) in `store`, `key` being under `prefix`, and
    /// keeps this read-ahead in step: the writes of a prefixed store no codec writes (the
    /// timers by key).
    #[pyo3(signature = (store, prefix, key, stored))]
    fn stage(
        slf: &Bound<'_, Self>,
        store: &Bound<'_, NativeKeyValueStore>,
        prefix: &[u8],
        key: &[u8],
        stored: Option<Vec<u8>>,
    ) -> PyResult<()> {
        if !key.starts_with(prefix) {
            return Err(raise(
                ErrorClass::InvalidArgumentError,
                "a read-ahead's write must be under the prefix it names".to_string(),
            ));
        }
        stage_under(store, Some(slf), prefix, &[(key.to_vec(), stored)])
    }

    /// The expiries of the timers held under `prefix` of the timers-by-key store
    /// (`state_layout::timer_keys`), earliest first, or `None` if not read ahead.
    fn timer_expiries(&self, prefix: &[u8]) -> PyResult<Option<Vec<i64>>> {
        self.entries
            .entries(prefix)
            .map(|entries| {
                entries
                    .iter()
                    .map(|(suffix, _)| layout::timer_suffix_time(suffix))
                    .collect::<kstate_core::Result<Vec<_>>>()
            })
            .transpose()
            .map_err(to_py)
    }
}

/// A write to stage: a key and its stored bytes (`None`: a delete).
type Write = (Vec<u8>, Option<Vec<u8>>);
type Writes = Vec<Write>;

thread_local! {
    /// The buffer a state call encodes its key and value into: the store copies what it stages,
    /// so a call allocates none of its own.
    static ENCODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A buffer larger than this goes back to the allocator after its call.
const ENCODED_KEPT_CAPACITY: usize = 64 * 1024;

/// `f` of an empty buffer to encode into: the thread's [`ENCODED`], or a new one when that is
/// in use (a pickled value's code calling state again).
fn with_encoded<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    ENCODED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffer) => {
            buffer.clear();
            let out = f(&mut buffer);
            if buffer.capacity() > ENCODED_KEPT_CAPACITY {
                *buffer = Vec::new();
            }
            out
        }
        Err(_) => f(&mut Vec::new()),
    })
}

/// Appends `<prefix><map key>`, the store key of map key `user_key` (encoded by `keys`), to
/// `out`.
fn push_map_key(
    py: Python<'_>,
    prefix: &[u8],
    keys: &StateCodec,
    user_key: &Bound<'_, PyAny>,
    out: &mut Vec<u8>,
) -> PyResult<()> {
    out.extend_from_slice(prefix);
    keys.encode_into(py, user_key, out)
}

/// `f` of the store key of map key `user_key` under `prefix` ([`push_map_key`]).
fn with_map_key<R>(
    py: Python<'_>,
    prefix: &[u8],
    keys: &StateCodec,
    user_key: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    with_encoded(|key| {
        push_map_key(py, prefix, keys, user_key, key)?;
        f(key)
    })
}

/// `f` of the stored value of `key` (under `prefix`) as the read-ahead holds it, or `None` if
/// it does not hold the prefix.
fn held<R>(
    ahead: Option<&Bound<'_, StateReadAhead>>,
    prefix: &[u8],
    key: &[u8],
    f: impl FnOnce(Option<&[u8]>) -> PyResult<R>,
) -> PyResult<Option<R>> {
    let Some(ahead) = ahead else {
        return Ok(None);
    };
    let ahead = ahead.try_borrow()?;
    ahead
        .entries
        .get(prefix, &key[prefix.len()..])
        .map(f)
        .transpose()
}

/// Stages `writes` (keys under `prefix`, `None`: a delete) and keeps the read-ahead, if any, in
/// step.
fn stage_under<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    store: &Bound<'_, NativeKeyValueStore>,
    ahead: Option<&Bound<'_, StateReadAhead>>,
    prefix: &[u8],
    writes: &[(K, Option<V>)],
) -> PyResult<()> {
    {
        let mut store = store.try_borrow_mut()?;
        guard(|| {
            store.logged.inner.store.put_all(
                &mut writes
                    .iter()
                    .map(|(k, v)| (k.as_ref(), v.as_ref().map(AsRef::as_ref))),
            )
        })?;
    }
    if let Some(ahead) = ahead {
        let mut ahead = ahead.try_borrow_mut()?;
        for (key, stored) in writes {
            ahead.entries.record(
                prefix,
                &key.as_ref()[prefix.len()..],
                stored.as_ref().map(AsRef::as_ref),
            );
        }
    }
    Ok(())
}

enum Codec {
    /// `version`: the byte naming the writer schema (`None`: the row alone, map keys);
    /// `readers[v]`: how values of schema version `v` read as the current schema.
    Typed {
        current: Py<RowCodec>,
        version: Option<u8>,
        readers: Vec<Py<RowReader>>,
    },
    /// Pickles: `dumps(value, 4)` (of `plain(value)` when given: a schema's normalization),
    /// `loads(bytes)`.
    Pickle {
        dumps: Py<PyAny>,
        loads: Py<PyAny>,
        plain: Option<Py<PyAny>>,
    },
}

/// How one state variable's values (or a map's keys) become stored bytes and back.
#[pyclass(module = "kstate._core", frozen)]
pub struct StateCodec {
    codec: Codec,
    /// Values decoded before, by their bytes, when the schema's decode to constants
    /// (`RowCodec::decodes_to_constants`). Never waited for: a read that finds it in use (another
    /// thread's read) decodes without it.
    decoded: Option<Mutex<DecodedValues<Py<PyAny>>>>,
}

fn expiry_of(stored: &[u8]) -> PyResult<i64> {
    layout::expiry_of(stored).map_err(to_py)
}

impl StateCodec {
    fn encode_into(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        match &self.codec {
            Codec::Typed {
                current, version, ..
            } => {
                out.extend(version.iter());
                current.get().encode_into(py, value, out)
            }
            Codec::Pickle { dumps, plain, .. } => {
                let raw = match plain {
                    None => dumps.bind(py).call1((value, PICKLE_PROTOCOL))?,
                    Some(plain) => dumps
                        .bind(py)
                        .call1((plain.bind(py).call1((value,))?, PICKLE_PROTOCOL))?,
                };
                out.extend_from_slice(raw.cast::<PyBytes>()?.as_bytes());
                Ok(())
            }
        }
    }

    fn decode_raw<'py>(&self, py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let Some(decoded) = &self.decoded else {
            return self.decode_new(py, raw);
        };
        // Not held while decoding: a decode may run Python code, and so another thread's read.
        let missing = match decoded.try_lock().as_deref_mut() {
            Ok(decoded) => match decoded.lookup(raw) {
                Lookup::Kept(value) => return Ok(value.bind(py).clone()),
                Lookup::Missing => true,
                Lookup::Skipped => false,
            },
            Err(_) => false,
        };
        let value = self.decode_new(py, raw)?;
        if missing {
            if let Ok(mut decoded) = decoded.try_lock() {
                decoded.keep(raw, value.clone().unbind());
            }
        }
        Ok(value)
    }

    /// The value of `raw`, decoded.
    fn decode_new<'py>(&self, py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let (value, end) = match &self.codec {
            Codec::Pickle { loads, .. } => return loads.bind(py).call1((PyBytes::new(py, raw),)),
            Codec::Typed {
                current,
                version: None,
                ..
            } => decode_row(py, &current.get().codec, None, raw, 0)?,
            Codec::Typed { readers, .. } => {
                let reader = raw
                    .first()
                    .and_then(|v| readers.get(*v as usize))
                    .ok_or_else(|| {
                        raise(
                            ErrorClass::CorruptedDataError,
                            format!(
                                "typed state value names schema {:?}, which was never recorded",
                                raw.first()
                            ),
                        )
                    })?;
                let reader = reader.get();
                decode_row(py, &reader.writer, Some(&reader.plan), raw, 1)?
            }
        };
        if end != raw.len() {
            return Err(raise(
                ErrorClass::CorruptedDataError,
                format!("typed state value: {} trailing bytes", raw.len() - end),
            ));
        }
        Ok(value)
    }

    /// The value of `<expiry><value>` bytes if it is live at `now_ms`.
    fn live<'py>(
        &self,
        py: Python<'py>,
        stored: Option<&[u8]>,
        now_ms: i64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(stored) = stored else {
            return Ok(None);
        };
        match layout::split_stored(stored).map_err(to_py)? {
            (expiry, value) if expiry > now_ms => Ok(Some(self.decode_raw(py, value)?)),
            _ => Ok(None),
        }
    }

    /// Appends `value`'s stored bytes, `<expiry><value>`, to `out`.
    fn push_stored(
        &self,
        py: Python<'_>,
        expiry: i64,
        value: &Bound<'_, PyAny>,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        layout::begin_stored_value(expiry, out);
        self.encode_into(py, value, out)
    }
}

#[pymethods]
impl StateCodec {
    /// Typed values: `current` checks and encodes, `version` (or `None` for map keys) is written
    /// first, `readers[v]` reads what schema version `v` wrote.
    #[staticmethod]
    fn typed(current: Py<RowCodec>, version: Option<u8>, readers: Vec<Py<RowReader>>) -> Self {
        let decoded = current
            .get()
            .decodes_to_constants()
            .then(|| Mutex::new(DecodedValues::default()));
        StateCodec {
            codec: Codec::Typed {
                current,
                version,
                readers,
            },
            decoded,
        }
    }

    /// Pickled values (protocol 4): `dumps` / `loads` are `pickle`'s; `plain` normalizes a value
    /// first (given a schema).
    #[staticmethod]
    #[pyo3(signature = (dumps, loads, plain=None))]
    fn pickled(dumps: Py<PyAny>, loads: Py<PyAny>, plain: Option<Py<PyAny>>) -> Self {
        StateCodec {
            codec: Codec::Pickle {
                dumps,
                loads,
                plain,
            },
            decoded: None,
        }
    }

    fn encode<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::new();
        self.encode_into(py, value, &mut out)?;
        Ok(PyBytes::new(py, &out))
    }

    /// The value encoded at `raw[offset:]` (which it fills exactly).
    #[pyo3(signature = (raw, offset=0))]
    fn decode<'py>(
        &self,
        py: Python<'py>,
        raw: &[u8],
        offset: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.decode_raw(py, raw.get(offset..).unwrap_or_default())
    }

    /// The value of stored `<expiry><value>` bytes, or `None` if absent or expired at `now_ms`.
    fn decode_live<'py>(
        &self,
        py: Python<'py>,
        stored: Option<&[u8]>,
        now_ms: i64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.live(py, stored, now_ms)
    }

    /// `key`'s live value in `store`, or `None`.
    fn get<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        key: &[u8],
        now_ms: i64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut store = store.try_borrow_mut()?;
        guard(|| {
            store
                .logged
                .inner
                .store
                .get_with(key, |v| self.live(py, v, now_ms))
        })?
    }

    /// Whether `key` has a live value in `store`.
    fn exists(
        &self,
        store: &Bound<'_, NativeKeyValueStore>,
        key: &[u8],
        now_ms: i64,
    ) -> PyResult<bool> {
        let mut store = store.try_borrow_mut()?;
        guard(|| {
            store.logged.inner.store.get_with(key, |v| {
                v.map(expiry_of)
                    .transpose()
                    .map(|e| e.is_some_and(|e| e > now_ms))
            })
        })?
    }

    /// Map state: the live value of map key `user_key` (encoded by `keys`) under `prefix`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (store, prefix, keys, user_key, now_ms, ahead=None))]
    fn map_get<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        keys: &StateCodec,
        user_key: &Bound<'py, PyAny>,
        now_ms: i64,
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        with_map_key(py, prefix, keys, user_key, |key| {
            match held(ahead, prefix, key, |stored| self.live(py, stored, now_ms))? {
                Some(value) => Ok(value),
                None => self.get(py, store, key, now_ms),
            }
        })
    }

    /// Map state: whether map key `user_key` has a live value under `prefix`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (store, prefix, keys, user_key, now_ms, ahead=None))]
    fn map_contains<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        keys: &StateCodec,
        user_key: &Bound<'py, PyAny>,
        now_ms: i64,
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<bool> {
        let live = |stored: Option<&[u8]>| -> PyResult<bool> {
            Ok(stored
                .map(expiry_of)
                .transpose()?
                .is_some_and(|e| e > now_ms))
        };
        with_map_key(py, prefix, keys, user_key, |key| {
            match held(ahead, prefix, key, live)? {
                Some(found) => Ok(found),
                None => self.exists(store, key, now_ms),
            }
        })
    }

    /// Map state: stages the delete of map key `user_key` under `prefix`.
    #[pyo3(signature = (store, prefix, keys, user_key, ahead=None))]
    fn map_remove<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        keys: &StateCodec,
        user_key: &Bound<'py, PyAny>,
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<()> {
        with_map_key(py, prefix, keys, user_key, |key| {
            stage_under(store, ahead, prefix, &[(key, None::<&[u8]>)])
        })
    }

    /// Map state: the live entries under `prefix` in key order, as values (`keys` `None`) or
    /// `(map key, value)` pairs decoded by `keys`; with `values=False`, the map keys alone (the
    /// values not decoded).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (store, prefix, now_ms, keys=None, ahead=None, values=true))]
    fn scan_live<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        now_ms: i64,
        keys: Option<&StateCodec>,
        ahead: Option<&Bound<'py, StateReadAhead>>,
        values: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let walk = match (keys, values) {
            (None, _) => Walk::MapValues,
            (Some(keys), false) => Walk::MapKeys(keys),
            (Some(keys), true) => Walk::MapEntries(keys),
        };
        self.walk(py, store, prefix, now_ms, walk, ahead)
    }

    /// List state: the live elements under `prefix`, in order.
    #[pyo3(signature = (store, prefix, now_ms, ahead=None))]
    fn list_live<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        now_ms: i64,
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.walk(py, store, prefix, now_ms, Walk::List, ahead)
    }

    /// List and map state: whether any entry under `prefix` is live at `now_ms`.
    #[pyo3(signature = (store, prefix, now_ms, ahead=None))]
    fn any_live(
        &self,
        store: &Bound<'_, NativeKeyValueStore>,
        prefix: &[u8],
        now_ms: i64,
        ahead: Option<&Bound<'_, StateReadAhead>>,
    ) -> PyResult<bool> {
        with_entries_under(store, ahead, prefix, |entries| {
            for (_, stored) in entries {
                if expiry_of(stored)? > now_ms {
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }

    /// List and map state `clear`: deletes every entry under `prefix`, in one call.
    #[pyo3(signature = (store, prefix, ahead=None))]
    fn delete_all(
        &self,
        store: &Bound<'_, NativeKeyValueStore>,
        prefix: &[u8],
        ahead: Option<&Bound<'_, StateReadAhead>>,
    ) -> PyResult<()> {
        let stale = self.keys_under(store, ahead, prefix)?;
        stage_under(store, ahead, prefix, &stale)
    }
}

/// What a walk of the entries under a list or map variable's prefix gives
/// ([`StateCodec::walk`]).
#[derive(Clone, Copy)]
enum Walk<'a> {
    /// A list's elements.
    List,
    /// A map's values.
    MapValues,
    /// A map's keys, decoded by this codec (the values not decoded).
    MapKeys(&'a StateCodec),
    /// A map's `(key, value)` pairs, the keys decoded by this codec.
    MapEntries(&'a StateCodec),
}

impl StateCodec {
    /// The live entries under `prefix` at `now_ms`, in key order, as `walk` gives them.
    fn walk<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        now_ms: i64,
        walk: Walk<'_>,
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        with_entries_under(store, ahead, prefix, |entries| {
            for (suffix, stored) in entries {
                let (expiry, value) = layout::split_stored(stored).map_err(to_py)?;
                if expiry <= now_ms {
                    continue;
                }
                match walk {
                    Walk::List => {
                        for element in layout::list_elements(suffix, value).map_err(to_py)? {
                            out.append(self.decode_raw(py, element.map_err(to_py)?)?)?
                        }
                    }
                    Walk::MapValues => out.append(self.decode_raw(py, value)?)?,
                    Walk::MapKeys(keys) => out.append(keys.decode_raw(py, suffix)?)?,
                    Walk::MapEntries(keys) => {
                        let user_key = keys.decode_raw(py, suffix)?;
                        let value = self.decode_raw(py, value)?;
                        out.append(PyTuple::new(py, [user_key, value])?)?
                    }
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Value state: stages `key -> <expiry><value>` (the value checked and encoded first).
    fn put(
        &self,
        py: Python<'_>,
        store: &Bound<'_, NativeKeyValueStore>,
        key: &[u8],
        expiry: i64,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        with_encoded(|stored| {
            self.push_stored(py, expiry, value, stored)?;
            let mut store = store.try_borrow_mut()?;
            guard(|| store.logged.inner.store.put(key, Some(stored)))
        })
    }

    /// Map state: stages `user_key -> value` under `prefix`, expiring at `expiry`.
    #[allow(clippy::too_many_arguments)]
    fn map_put<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        keys: &StateCodec,
        user_key: &Bound<'py, PyAny>,
        expiry: i64,
        value: &Bound<'py, PyAny>,
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<()> {
        with_encoded(|encoded| {
            push_map_key(py, prefix, keys, user_key, encoded)?;
            let key_len = encoded.len();
            self.push_stored(py, expiry, value, encoded)?;
            let (key, stored) = encoded.split_at(key_len);
            stage_under(store, ahead, prefix, &[(key, Some(stored))])
        })
    }

    /// List state `put`: the list under `prefix` becomes one run of `values`
    /// (`state_layout::list_replacement`: its other entries deleted, nothing written if it holds
    /// the run already); returns the writes staged and the sequence the next entry takes.
    fn replace_list<'py>(
        &self,
        py: Python<'py>,
        store: &Bound<'py, NativeKeyValueStore>,
        prefix: &[u8],
        expiry: i64,
        values: &[Bound<'py, PyAny>],
        ahead: Option<&Bound<'py, StateReadAhead>>,
    ) -> PyResult<(Writes, u64)> {
        let stored = self.run(py, expiry, values)?;
        let replacement = with_entries_under(store, ahead, prefix, |entries| {
            layout::list_replacement(prefix, entries, stored).map_err(to_py)
        })?;
        stage_under(store, ahead, prefix, &replacement.writes)?;
        Ok((replacement.writes, replacement.next_sequence))
    }

    /// A list run's stored value: `values` encoded after `expiry` (`state_layout`'s run).
    fn run(&self, py: Python<'_>, expiry: i64, values: &[Bound<'_, PyAny>]) -> PyResult<Vec<u8>> {
        let mut out = Vec::with_capacity(16 + 16 * values.len());
        self.push_run(py, expiry, values, &mut out)?;
        Ok(out)
    }

    /// Appends [`Self::run`] to `out`.
    fn push_run(
        &self,
        py: Python<'_>,
        expiry: i64,
        values: &[Bound<'_, PyAny>],
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        layout::begin_stored_value(expiry, out);
        for value in values {
            let start = layout::begin_run_element(out);
            self.encode_into(py, value, out)?;
            layout::end_run_element(out, start).map_err(to_py)?;
        }
        Ok(())
    }

    /// Deletes of every entry under `prefix`.
    fn keys_under(
        &self,
        store: &Bound<'_, NativeKeyValueStore>,
        ahead: Option<&Bound<'_, StateReadAhead>>,
        prefix: &[u8],
    ) -> PyResult<Writes> {
        with_entries_under(store, ahead, prefix, |entries| {
            Ok(entries
                .iter()
                .map(|(suffix, _)| ([prefix, suffix].concat(), None))
                .collect())
        })
    }
}

/// The grouping key a task's state calls act on (its prefix, `state_layout::key_prefix`) and
/// the batch's processing time, shared by a handle's bound calls ([`MapCalls`]): set once per
/// key, so a per-row call passes only its own arguments.
#[pyclass(module = "kstate._core")]
pub struct StateCursor {
    /// The current grouping key, pickled (a value state's store key).
    key: Py<PyBytes>,
    prefix: Vec<u8>,
    /// The processing time (ms) expiries are checked against.
    #[pyo3(get, set)]
    now_ms: i64,
}

#[pymethods]
impl StateCursor {
    #[new]
    fn new(py: Python<'_>, now_ms: i64) -> PyResult<Self> {
        Ok(Self {
            key: PyBytes::new(py, b"").unbind(),
            prefix: layout::key_prefix(b"").map_err(to_py)?,
            now_ms,
        })
    }

    /// Makes `pickled_key` the current grouping key; returns its prefix.
    fn set<'py>(&mut self, pickled_key: &Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyBytes>> {
        // Into the buffer the last key's prefix took (a key costs no allocation here), after
        // it and then moved down: a key refused leaves the last one current.
        let last = self.prefix.len();
        layout::push_key_prefix(pickled_key.as_bytes(), &mut self.prefix).map_err(to_py)?;
        self.prefix.drain(..last);
        self.key = pickled_key.clone().unbind();
        Ok(PyBytes::new(pickled_key.py(), &self.prefix))
    }
}

/// A state variable's TTL: its duration, and its entries' index (store `tws.ttl`). The
/// variable's native calls stamp each write with the batch's processing time + the TTL and
/// record it in the index themselves (no Python frame per entry).
#[pyclass(module = "kstate._core", frozen)]
pub struct TtlIndex {
    store: Py<NativeKeyValueStore>,
    /// The variable's name as the index holds it (`state_layout::ttl_name`).
    name: Vec<u8>,
    ttl_ms: i64,
}

#[pymethods]
impl TtlIndex {
    #[new]
    fn new(store: Py<NativeKeyValueStore>, name: &str, ttl_ms: i64) -> PyResult<Self> {
        Ok(Self {
            store,
            name: layout::ttl_name(name).map_err(to_py)?,
            ttl_ms,
        })
    }
}

impl TtlIndex {
    /// The expiry of what is written at processing time `now_ms`.
    fn expiry(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.ttl_ms)
    }

    /// Records that entries of the grouping key `prefix` were written with `expiry`: one index
    /// entry for all of them (the sweep reads the key's entries).
    fn record(&self, py: Python<'_>, expiry: i64, prefix: &[u8]) -> PyResult<()> {
        let entry = layout::ttl_entry(expiry, &self.name, prefix);
        let mut store = self.store.bind(py).try_borrow_mut()?;
        guard(|| store.logged.inner.store.put(&entry, Some(b"")))
    }
}

/// Deletes the state that the TTL index entries of `index` due at `now_ms` name and that
/// expired by then, and those index entries (`kstate_core::spark::ttl_sweep`); `variables`: each
/// declared variable's name, whether it is value state, and its store. Returns how many state
/// entries it deleted.
#[pyfunction]
pub fn sweep_expired_state(
    py: Python<'_>,
    index: &Bound<'_, NativeKeyValueStore>,
    variables: Vec<(String, bool, Bound<'_, NativeKeyValueStore>)>,
    now_ms: i64,
) -> PyResult<u64> {
    let mut index = index.try_borrow_mut()?;
    let mut borrowed = variables
        .iter()
        .map(|(name, value, store)| Ok((name, *value, store.try_borrow_mut()?)))
        .collect::<PyResult<Vec<_>>>()?;
    let mut stores: HashMap<String, SweptStore<'_>> = borrowed
        .iter_mut()
        .map(|(name, value, store)| {
            let store = &mut store.logged.inner.store;
            let swept = if *value {
                SweptStore::Value(store)
            } else {
                SweptStore::Entries(store)
            };
            (name.to_string(), swept)
        })
        .collect();
    let index = &mut index.logged.inner.store;
    detached(py, || sweep_expired(index, &mut stores, now_ms))
}

/// The expiry of a variable's writes at processing time `now_ms`: `ttl`'s, or none.
fn write_expiry(ttl: Option<&Py<TtlIndex>>, now_ms: i64) -> i64 {
    ttl.map_or(NO_EXPIRY, |ttl| ttl.get().expiry(now_ms))
}

/// The live entries of a list or map variable under the cursor's grouping key, as `walk` gives
/// them (`StateCodec::walk` at the cursor's time), as an iterator: what a bound walk returns.
fn live_under_cursor<'py>(
    py: Python<'py>,
    store: &Py<NativeKeyValueStore>,
    values: &Py<StateCodec>,
    cursor: &Py<StateCursor>,
    walk: Walk<'_>,
    ahead: Option<&Py<StateReadAhead>>,
) -> PyResult<Bound<'py, PyIterator>> {
    let cursor = cursor.bind(py).try_borrow()?;
    let entries = values.get().walk(
        py,
        store.bind(py),
        &cursor.prefix,
        cursor.now_ms,
        walk,
        ahead.map(|a| a.bind(py)),
    )?;
    entries.try_iter()
}

/// A value variable's `get` and `update` as native methods bound to its store,
/// codec and the handle's [`StateCursor`]: one native call, no Python frame. `ahead` holds the
/// stored values read ahead for the batch's keys (the handle's dict for this variable: pickled
/// grouping key -> stored bytes, `None` if absent); a read takes the key's value from it when it
/// has one, and a write drops it. A `None` value goes through `require`, which raises.
#[pyclass(module = "kstate._core", frozen)]
pub struct ValueCalls {
    store: Py<NativeKeyValueStore>,
    values: Py<StateCodec>,
    ahead: Py<PyDict>,
    cursor: Py<StateCursor>,
    require: Py<PyAny>,
    ttl: Option<Py<TtlIndex>>,
}

#[pymethods]
impl ValueCalls {
    #[new]
    #[pyo3(signature = (store, values, ahead, cursor, require, ttl=None))]
    fn new(
        store: Py<NativeKeyValueStore>,
        values: Py<StateCodec>,
        ahead: Py<PyDict>,
        cursor: Py<StateCursor>,
        require: Py<PyAny>,
        ttl: Option<Py<TtlIndex>>,
    ) -> Self {
        Self {
            store,
            values,
            ahead,
            cursor,
            require,
            ttl,
        }
    }

    /// Spark's `get()`: the current key's live value, or `None`.
    fn get<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let cursor = self.cursor.bind(py).try_borrow()?;
        let key = cursor.key.bind(py);
        let codec = self.values.get();
        match self.ahead.bind(py).get_item(key)? {
            Some(stored) if stored.is_none() => Ok(None),
            Some(stored) => codec.live(
                py,
                Some(stored.cast::<PyBytes>()?.as_bytes()),
                cursor.now_ms,
            ),
            None => codec.get(py, self.store.bind(py), key.as_bytes(), cursor.now_ms),
        }
    }

    /// Spark's `update(newValue)`, its argument's name too.
    #[pyo3(signature = (newValue))]
    #[allow(non_snake_case)]
    fn update(&self, newValue: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = newValue.py();
        if newValue.is_none() {
            self.require.bind(py).call1((newValue,))?;
        }
        let cursor = self.cursor.bind(py).try_borrow()?;
        let key = cursor.key.bind(py);
        let ahead = self.ahead.bind(py);
        if ahead.contains(key)? {
            ahead.del_item(key)?;
        }
        let expiry = write_expiry(self.ttl.as_ref(), cursor.now_ms);
        self.values
            .get()
            .put(py, self.store.bind(py), key.as_bytes(), expiry, newValue)?;
        match &self.ttl {
            Some(ttl) => ttl.get().record(py, expiry, &cursor.prefix),
            None => Ok(()),
        }
    }
}

/// A typed map variable's per-row calls (`containsKey`, `getValue`, `updateValue`) and walks
/// (`iterator`, `keys`, `values`) as native methods bound to its store, codecs, read-ahead, TTL
/// and the handle's [`StateCursor`]: a processor's call is one native call, no Python frame. A key the native
/// path does not take as is (`None`; with `bare`, a one-field key schema, a bare string) goes
/// through `normalize` (Python's check, which raises or returns the key Spark would store); a
/// `None` value through `require`, which raises.
#[pyclass(module = "kstate._core", frozen)]
pub struct MapCalls {
    store: Py<NativeKeyValueStore>,
    values: Py<StateCodec>,
    keys: Py<StateCodec>,
    ahead: Option<Py<StateReadAhead>>,
    cursor: Py<StateCursor>,
    bare: bool,
    normalize: Py<PyAny>,
    require: Py<PyAny>,
    ttl: Option<Py<TtlIndex>>,
}

/// The shape of [`StateCodec`]'s map reads (`map_contains`, `map_get`).
type MapRead<'py, R> = fn(
    &StateCodec,
    Python<'py>,
    &Bound<'py, NativeKeyValueStore>,
    &[u8],
    &StateCodec,
    &Bound<'py, PyAny>,
    i64,
    Option<&Bound<'py, StateReadAhead>>,
) -> PyResult<R>;

impl MapCalls {
    fn user_key<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if key.is_none() || (self.bare && key.is_instance_of::<PyString>()) {
            return self.normalize.bind(key.py()).call1((key,));
        }
        Ok(key.clone())
    }

    /// The current grouping key's live entries: `(key, value)` pairs, the keys alone (`values`
    /// false) or the values alone (`keys` false).
    fn walk<'py>(
        &self,
        py: Python<'py>,
        keys: bool,
        values: bool,
    ) -> PyResult<Bound<'py, PyIterator>> {
        let walk = match (keys, values) {
            (false, _) => Walk::MapValues,
            (true, false) => Walk::MapKeys(self.keys.get()),
            (true, true) => Walk::MapEntries(self.keys.get()),
        };
        live_under_cursor(
            py,
            &self.store,
            &self.values,
            &self.cursor,
            walk,
            self.ahead.as_ref(),
        )
    }

    /// `read` of the user's `key` in the current grouping key's map, at the cursor's time.
    fn read<'py, R>(&self, key: &Bound<'py, PyAny>, read: MapRead<'py, R>) -> PyResult<R> {
        let py = key.py();
        let key = self.user_key(key)?;
        let cursor = self.cursor.bind(py).try_borrow()?;
        read(
            self.values.get(),
            py,
            self.store.bind(py),
            &cursor.prefix,
            self.keys.get(),
            &key,
            cursor.now_ms,
            self.ahead.as_ref().map(|a| a.bind(py)),
        )
    }
}

#[pymethods]
impl MapCalls {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (store, values, keys, ahead, cursor, bare, normalize, require, ttl=None))]
    fn new(
        store: Py<NativeKeyValueStore>,
        values: Py<StateCodec>,
        keys: Py<StateCodec>,
        ahead: Option<Py<StateReadAhead>>,
        cursor: Py<StateCursor>,
        bare: bool,
        normalize: Py<PyAny>,
        require: Py<PyAny>,
        ttl: Option<Py<TtlIndex>>,
    ) -> Self {
        Self {
            store,
            values,
            keys,
            ahead,
            cursor,
            bare,
            normalize,
            require,
            ttl,
        }
    }

    #[allow(non_snake_case)]
    #[pyo3(name = "containsKey")]
    fn contains_key(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.read(key, StateCodec::map_contains)
    }

    #[pyo3(name = "getValue")]
    fn get_value<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.read(key, StateCodec::map_get)
    }

    /// Spark's `iterator()`: the live `(key, value)` pairs in key order.
    fn iterator<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.walk(py, true, true)
    }

    /// Spark's `keys()`: the live keys in order (their values not decoded).
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.walk(py, true, false)
    }

    /// Spark's `values()`: the live values in key order.
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        self.walk(py, false, true)
    }

    #[pyo3(name = "updateValue")]
    fn update_value(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = key.py();
        if value.is_none() {
            self.require.bind(py).call1((value,))?;
        }
        let key = self.user_key(key)?;
        let cursor = self.cursor.bind(py).try_borrow()?;
        let expiry = write_expiry(self.ttl.as_ref(), cursor.now_ms);
        self.values.get().map_put(
            py,
            self.store.bind(py),
            &cursor.prefix,
            self.keys.get(),
            &key,
            expiry,
            value,
            self.ahead.as_ref().map(|a| a.bind(py)),
        )?;
        match &self.ttl {
            Some(ttl) => ttl.get().record(py, expiry, &cursor.prefix),
            None => Ok(()),
        }
    }
}

/// A list variable's `get` and appends as native methods bound to its store, codec, read-ahead
/// and the handle's [`StateCursor`] (`get`, `appendValue` and `put` are one native call each, no
/// Python frame), its `clear`, and the sequence its next entry takes, known once per key (the
/// read-ahead's, else one reverse seek of the store) and kept as it appends, puts and clears. A
/// `None` value goes through `require`, which raises.
#[pyclass(module = "kstate._core")]
pub struct ListCalls {
    store: Py<NativeKeyValueStore>,
    values: Py<StateCodec>,
    ahead: Option<Py<StateReadAhead>>,
    cursor: Py<StateCursor>,
    require: Py<PyAny>,
    /// Checks a `put`'s values that are not a plain list: raises Spark's errors, or gives them
    /// back as a list.
    check: Py<PyAny>,
    /// The prefix of the list whose next sequence is known, and that sequence.
    next: Option<(Vec<u8>, u64)>,
    ttl: Option<Py<TtlIndex>>,
}

impl ListCalls {
    /// The next sequence of the list under `prefix`: one past its newest entry's, live or not.
    fn next_of(&self, py: Python<'_>, prefix: &[u8]) -> PyResult<u64> {
        if let Some((known, next)) = &self.next {
            if known.as_slice() == prefix {
                return Ok(*next);
            }
        }
        if let Some(ahead) = &self.ahead {
            if let Some(next) = ahead.bind(py).try_borrow()?.entries.next_sequence(prefix) {
                return next.map_err(to_py);
            }
        }
        let store = self.store.bind(py).try_borrow()?;
        let newest = guard(|| {
            store
                .logged
                .inner
                .store
                .scan(&KeyRange::prefix(prefix), Direction::Reverse, 1)
        })?;
        match newest.first() {
            None => Ok(0),
            Some((key, _)) => Ok(layout::list_sequence(key, prefix).map_err(to_py)? + 1),
        }
    }

    /// Remembers `sequence` as the next of the list under `prefix` (the buffer kept).
    fn remember_next(&mut self, prefix: &[u8], sequence: u64) {
        match &mut self.next {
            Some((known, next)) => {
                known.clear();
                known.extend_from_slice(prefix);
                *next = sequence;
            }
            None => self.next = Some((prefix.to_vec(), sequence)),
        }
    }

    /// Records the expiry of the elements of `writes` (the puts) in the TTL index, if any.
    fn index(&self, py: Python<'_>, prefix: &[u8], expiry: i64, writes: &[Write]) -> PyResult<()> {
        if !writes.iter().any(|(_, stored)| stored.is_some()) {
            return Ok(());
        }
        self.index_put(py, prefix, expiry)
    }

    /// Records the expiry of a put under `prefix` in the TTL index, if any.
    fn index_put(&self, py: Python<'_>, prefix: &[u8], expiry: i64) -> PyResult<()> {
        match &self.ttl {
            Some(ttl) => ttl.get().record(py, expiry, prefix),
            None => Ok(()),
        }
    }

    /// The elements `put` and `appendList` take from `values`: a non-empty list or tuple without
    /// `None` as it is, anything else as `check` gives it back (or raises, as Spark refuses it).
    fn elements<'py>(&self, values: &Bound<'py, PyAny>) -> PyResult<Elements<'py>> {
        match plain_elements(values) {
            Some(elements) => Ok(elements),
            None => Ok(Elements::from_vec(
                self.check.bind(values.py()).call1((values,))?.extract()?,
            )),
        }
    }

    /// Appends `values` to the current key's list as one entry: a run (`appendList`), or with
    /// `run` false the one element of `values` (`appendValue`).
    fn append<'py>(
        &mut self,
        py: Python<'py>,
        values: &[Bound<'py, PyAny>],
        run: bool,
    ) -> PyResult<()> {
        let cursor = self.cursor.bind(py).clone();
        let cursor = cursor.try_borrow()?;
        let (prefix, expiry) = (
            &cursor.prefix,
            write_expiry(self.ttl.as_ref(), cursor.now_ms),
        );
        let sequence = self.next_of(py, prefix)?;
        let codec = self.values.get();
        with_encoded(|encoded| {
            let key_len = if run {
                layout::push_list_run_key(prefix, sequence, encoded);
                let key_len = encoded.len();
                codec.push_run(py, expiry, values, encoded)?;
                key_len
            } else {
                layout::push_list_key(prefix, sequence, encoded);
                let key_len = encoded.len();
                codec.push_stored(py, expiry, &values[0], encoded)?;
                key_len
            };
            let (key, stored) = encoded.split_at(key_len);
            stage_under(
                self.store.bind(py),
                self.ahead.as_ref().map(|a| a.bind(py)),
                prefix,
                &[(key, Some(stored))],
            )
        })?;
        self.index_put(py, prefix, expiry)?;
        self.remember_next(prefix, sequence + 1);
        Ok(())
    }
}

/// A list call's elements, inline up to 8 (a processor's `put` of its last few values).
type Elements<'py> = SmallVec<[Bound<'py, PyAny>; 8]>;

/// The elements of `values` when it is a non-empty list or tuple without `None` (what a
/// processor passes), else `None`: the caller's check decides.
fn plain_elements<'py>(values: &Bound<'py, PyAny>) -> Option<Elements<'py>> {
    let elements: Elements<'py> = if let Ok(list) = values.cast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = values.cast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        return None;
    };
    (!elements.is_empty() && elements.iter().all(|e| !e.is_none())).then_some(elements)
}

#[pymethods]
impl ListCalls {
    #[new]
    #[pyo3(signature = (store, values, ahead, cursor, require, check, ttl=None))]
    fn new(
        store: Py<NativeKeyValueStore>,
        values: Py<StateCodec>,
        ahead: Option<Py<StateReadAhead>>,
        cursor: Py<StateCursor>,
        require: Py<PyAny>,
        check: Py<PyAny>,
        ttl: Option<Py<TtlIndex>>,
    ) -> Self {
        Self {
            store,
            values,
            ahead,
            cursor,
            require,
            check,
            next: None,
            ttl,
        }
    }

    /// Spark's `get()`: the current key's live elements in order, as an iterator.
    fn get<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        live_under_cursor(
            py,
            &self.store,
            &self.values,
            &self.cursor,
            Walk::List,
            self.ahead.as_ref(),
        )
    }

    /// Spark's `appendValue(newState)` (its argument's name too: processors pass it by name).
    #[pyo3(name = "appendValue", signature = (newState))]
    #[allow(non_snake_case)]
    fn append_value(&mut self, newState: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = newState.py();
        if newState.is_none() {
            self.require.bind(py).call1((newState,))?;
        }
        self.append(py, std::slice::from_ref(newState), false)
    }

    /// Spark's `appendList(newState)`: appends `newState`'s elements (`elements`) to the current
    /// key's list.
    #[pyo3(name = "appendList", signature = (newState))]
    #[allow(non_snake_case)]
    fn append_list(&mut self, newState: &Bound<'_, PyAny>) -> PyResult<()> {
        let values = self.elements(newState)?;
        self.append(newState.py(), &values, true)
    }

    /// `put`: the current key's list becomes `newState`'s elements (`elements`;
    /// `StateCodec::replace_list`). Spark's `put(newState)`, its argument's name too.
    #[pyo3(signature = (newState))]
    #[allow(non_snake_case)]
    fn put(&mut self, newState: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = newState.py();
        let values = self.elements(newState)?;
        let cursor = self.cursor.bind(py).clone();
        let cursor = cursor.try_borrow()?;
        let (prefix, expiry) = (
            &cursor.prefix,
            write_expiry(self.ttl.as_ref(), cursor.now_ms),
        );
        let (written, next) = self.values.get().replace_list(
            py,
            self.store.bind(py),
            prefix,
            expiry,
            &values,
            self.ahead.as_ref().map(|a| a.bind(py)),
        )?;
        self.index(py, prefix, expiry, &written)?;
        self.remember_next(prefix, next);
        Ok(())
    }

    /// `clear`: deletes the current key's list.
    fn clear(&mut self, py: Python<'_>) -> PyResult<()> {
        let cursor = self.cursor.bind(py).clone();
        let prefix = &cursor.try_borrow()?.prefix;
        self.values.get().delete_all(
            self.store.bind(py),
            prefix,
            self.ahead.as_ref().map(|a| a.bind(py)),
        )?;
        self.remember_next(prefix, 0);
        Ok(())
    }
}
