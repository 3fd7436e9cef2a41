//! RocksDB's serialized `WriteBatch` (what `WriteBatch::data` returns and `from_data` takes, and
//! what RocksDB's write-ahead log holds): a 12-byte header (u64 sequence number, u32 record count,
//! little-endian) and records of a tag, for a column family other than `default` its varint32 id,
//! then varint32-length-prefixed key and (puts only) value.
//!
//! kstate's overlay writes its staged writes in this form as they come, so a commit hands RocksDB
//! the whole batch in one copy instead of a call per key. The tag and column family bytes are
//! not spelled out here: they are read off a batch RocksDB itself built (`RecordPrefixes::probe`).

use rocksdb::WriteBatch;

use crate::error::{Error, Result};

pub const HEADER_LEN: usize = 12;
const COUNT_AT: usize = 8;

/// What precedes the key of a put and of a delete record of one column family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordPrefixes {
    put: Vec<u8>,
    delete: Vec<u8>,
}

impl Default for RecordPrefixes {
    /// The `default` column family's (`kTypeValue`, `kTypeDeletion`): for writes kept in this
    /// form without going to RocksDB.
    fn default() -> Self {
        Self {
            put: vec![0x1],
            delete: vec![0x0],
        }
    }
}

impl RecordPrefixes {
    /// Reads the prefixes off RocksDB's own records: `put` holds one put of an empty key and
    /// value, `delete` one delete of an empty key, both in the column family wanted.
    pub fn probe(put: &WriteBatch, delete: &WriteBatch) -> Result<Self> {
        Ok(Self {
            put: prefix_of(put, 2)?,
            delete: prefix_of(delete, 1)?,
        })
    }
}

/// The bytes before the key of a batch's one record, which ends with `slices` empty
/// length-prefixed slices (a zero byte each).
fn prefix_of(batch: &WriteBatch, slices: usize) -> Result<Vec<u8>> {
    let data = batch.data();
    match data.len().checked_sub(slices) {
        Some(end)
            if end > HEADER_LEN && batch.len() == 1 && data[end..].iter().all(|&b| b == 0) =>
        {
            Ok(data[HEADER_LEN..end].to_vec())
        }
        _ => Err(Error::Storage(format!(
            "unexpected RocksDB write batch layout {data:?}"
        ))),
    }
}

/// Where a record, its key and its value landed in the batch (offsets from its start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordSpan {
    pub start: usize,
    pub key: usize,
    pub key_end: usize,
    /// Start of the value (`end` for a delete).
    pub value: usize,
    pub end: usize,
    pub is_put: bool,
}

impl RecordSpan {
    /// The same record moved to start at `start`.
    pub fn moved_to(&self, start: usize) -> Self {
        let at = |offset: usize| offset - self.start + start;
        Self {
            start,
            key: at(self.key),
            key_end: at(self.key_end),
            value: at(self.value),
            end: at(self.end),
            is_put: self.is_put,
        }
    }
}

/// An empty batch: the header alone.
pub fn new_batch(capacity: usize) -> Vec<u8> {
    let mut batch = Vec::with_capacity(capacity.max(HEADER_LEN));
    batch.resize(HEADER_LEN, 0);
    batch
}

/// Appends a put (`Some`) or a delete (`None`) record.
pub fn push_record(
    batch: &mut Vec<u8>,
    prefixes: &RecordPrefixes,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<RecordSpan> {
    let start = batch.len();
    let prefix = match value {
        Some(_) => &prefixes.put,
        None => &prefixes.delete,
    };
    batch.reserve(prefix.len() + 10 + key.len() + value.map_or(0, <[u8]>::len));
    batch.extend_from_slice(prefix);
    push_slice(batch, key)?;
    let key_end = batch.len();
    if let Some(v) = value {
        push_slice(batch, v)?;
    }
    let end = batch.len();
    Ok(RecordSpan {
        start,
        key: key_end - key.len(),
        key_end,
        value: end - value.map_or(0, <[u8]>::len),
        end,
        is_put: value.is_some(),
    })
}

/// Whether a serialized batch holds no records.
pub fn is_empty(batch: &[u8]) -> bool {
    batch.len() <= HEADER_LEN
}

/// The number of records the header gives.
pub fn count(batch: &[u8]) -> Result<usize> {
    let bytes: [u8; 4] = batch
        .get(COUNT_AT..HEADER_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            Error::Storage(format!(
                "a write batch of {} bytes has no header",
                batch.len()
            ))
        })?;
    Ok(u32::from_le_bytes(bytes) as usize)
}

/// Appends the records of `other` (a serialized batch) to `batch`, and counts them in its header.
pub fn append(batch: &mut Vec<u8>, other: &[u8]) -> Result<()> {
    let total = count(batch)? + count(other)?;
    batch.extend_from_slice(&other[HEADER_LEN..]);
    set_count(batch, total)
}

/// Records the number of records in the header.
pub fn set_count(batch: &mut [u8], count: usize) -> Result<()> {
    let count = u32::try_from(count)
        .map_err(|_| Error::InvalidArgument(format!("a batch of {count} writes is too large")))?;
    batch[COUNT_AT..HEADER_LEN].copy_from_slice(&count.to_le_bytes());
    Ok(())
}

fn push_slice(batch: &mut Vec<u8>, bytes: &[u8]) -> Result<()> {
    let mut len = u32::try_from(bytes.len()).map_err(|_| {
        Error::InvalidArgument(format!(
            "a key or value of {} bytes is over RocksDB's 4 GiB limit",
            bytes.len()
        ))
    })?;
    while len >= 0x80 {
        batch.push((len as u8) | 0x80);
        len >>= 7;
    }
    batch.push(len as u8);
    batch.extend_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_match_rocksdb_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let db = rocksdb::DB::open_cf(&options, dir.path(), ["other"]).unwrap();
        let cf = db.cf_handle("other").unwrap();
        let (mut put, mut delete) = (WriteBatch::default(), WriteBatch::default());
        put.put_cf(cf, b"", b"");
        delete.delete_cf(cf, b"");
        let prefixes = RecordPrefixes::probe(&put, &delete).unwrap();
        let long = vec![7u8; 300]; // a two-byte length
        let mut ours = new_batch(0);
        let span = push_record(&mut ours, &prefixes, b"k1", Some(&long)).unwrap();
        assert_eq!(&ours[span.key..span.key_end], b"k1");
        assert_eq!(&ours[span.value..span.end], &long[..]);
        push_record(&mut ours, &prefixes, b"k2", None).unwrap();
        set_count(&mut ours, 2).unwrap();
        let mut theirs = WriteBatch::default();
        theirs.put_cf(cf, b"k1", &long);
        theirs.delete_cf(cf, b"k2");
        assert_eq!(ours, theirs.data());
        db.write(WriteBatch::from_data(&ours)).unwrap();
        assert_eq!(db.get_cf(cf, b"k1").unwrap(), Some(long));

        let (mut put, mut delete) = (WriteBatch::default(), WriteBatch::default());
        put.put(b"", b"");
        delete.delete(b"");
        let default = RecordPrefixes::probe(&put, &delete).unwrap();
        assert_eq!(default, RecordPrefixes::default());
    }

    #[test]
    fn appended_records_are_rocksdb_own_concatenation() {
        let (mut first, mut second, mut both) = (
            WriteBatch::default(),
            WriteBatch::default(),
            WriteBatch::default(),
        );
        first.put(b"a", b"1");
        first.delete(b"b");
        second.put(b"c", b"3");
        for (k, v) in [
            (&b"a"[..], Some(&b"1"[..])),
            (b"b", None),
            (b"c", Some(b"3")),
        ] {
            match v {
                Some(v) => both.put(k, v),
                None => both.delete(k),
            }
        }
        let mut ours = first.data().to_vec();
        append(&mut ours, second.data()).unwrap();
        assert_eq!(ours, both.data());
        assert_eq!(count(&ours).unwrap(), 3);
        assert!(count(&ours[..5]).is_err());
    }
}
