//! The exception classes of `kstate.errors`, created here and registered in `kstate._core`
//! (Python's `kstate.errors` re-exports them), and the one match from the core's `Error` to
//! them. Panics are caught and never reach Python.
//!
//! pyo3's `create_exception!` declares one base class; four of these have two (`KStateError`
//! and the builtin Spark's verifier or Python itself raises), so every class is made the way
//! CPython's `PyErr_NewException` makes one: `type(name, bases, {"__module__": ..., "__doc__": ...})`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use kstate_core::Error;
use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// Declares `ErrorClass` and `ErrorClass::ALL` from one list.
macro_rules! error_classes {
    ($($class:ident),+ $(,)?) => {
        /// Every exception class of `kstate.errors`, parents before their subclasses.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(clippy::enum_variant_names)] // each variant is named as its Python class (`name()`)
        pub enum ErrorClass {
            $($class),+
        }

        impl ErrorClass {
            const ALL: &'static [ErrorClass] = &[$(ErrorClass::$class),+];
        }
    };
}

error_classes!(
    KStateError,
    InvalidStateStoreError,
    StoreClosedError,
    StoreBehindChangelogError,
    ChangelogTruncatedError,
    StateLockTimeoutError,
    BatchConflictError,
    ProcessorStateError,
    StoreCorruptedError,
    RemoteStorageError,
    CommitConflictError,
    CorruptedDataError,
    TaskAssignmentError,
    InvalidArgumentError,
    StateTypeError,
    InvalidTimestampError,
    SerializationError,
    PartitioningError,
    MisroutedRowsError,
    PartitioningChangedError,
    SparkConnectUnsupportedError,
    JavaNotFoundError,
    StateSchemaError,
    DeletedStateVariableError,
);

/// A base of a class: another kstate class (created before it) or a builtin.
enum Base {
    Kstate(ErrorClass),
    Exception,
    ValueError,
    TypeError,
    RuntimeError,
}

use Base::Kstate;
use ErrorClass::*;

impl ErrorClass {
    /// The class's bases and docstring.
    fn definition(self) -> (&'static [Base], &'static str) {
        match self {
            KStateError => (&[Base::Exception], "Base class of every kstate error."),
            InvalidStateStoreError => (
                &[Kstate(KStateError)],
                "The store cannot serve the call in its current state (Kafka's \
                 ``InvalidStateStoreException``).",
            ),
            StoreClosedError => (
                &[Kstate(InvalidStateStoreError)],
                "The store, or the store an iterator or view belongs to, is closed or was never \
                 initialized.",
            ),
            StoreBehindChangelogError => (
                &[Kstate(InvalidStateStoreError)],
                "A logged store's offset is below its changelog's start (compaction or retention \
                 removed\nwhat it would replay): its local state is restored from scratch.",
            ),
            ChangelogTruncatedError => (
                &[Kstate(InvalidStateStoreError)],
                "A store's local state is older than its changelog's start, whose history before \
                 it was\ndeleted because snapshots hold it (``minBatchesToRetain``), and no \
                 snapshot could be loaded:\nrestoring from the changelog would skip committed \
                 writes, so nothing was replayed. The\nsnapshots' location is missing files or \
                 was changed by hand; the log says which snapshots\nwere tried and why they \
                 failed.",
            ),
            StateLockTimeoutError => (
                &[Kstate(InvalidStateStoreError)],
                "Another process held the lock of a task directory or of a changelog partition for \
                 longer\nthan the wait allowed (kstate.spark: a zombie attempt of the same \
                 partition, or a Python\nworker that hangs).",
            ),
            BatchConflictError => (
                &[Kstate(KStateError)],
                "kstate.spark: another attempt of the same partition and micro-batch \
                 (speculation, a\nzombie) published the batch first; this attempt published \
                 nothing and gives up.",
            ),
            ProcessorStateError => (
                &[Kstate(KStateError)],
                "RocksDB or the file system failed (Kafka's ``ProcessorStateException``).",
            ),
            StoreCorruptedError => (
                &[Kstate(ProcessorStateError)],
                "RocksDB found the store's own files damaged (its ``Corruption`` status). A store \
                 that\nis a copy of a changelog is rebuilt from it (kstate.spark does so).",
            ),
            RemoteStorageError => (
                &[Kstate(ProcessorStateError)],
                "The object store holding a remote changelog failed or refused a request \
                 (unreachable,\nmissing bucket, no permission). A commit that raises it applied \
                 nothing locally, and\nretrying it is safe: if the failed attempt did reach the \
                 object store after all, the retry\ngets ``CommitConflictError`` and \
                 ``recover()`` applies that commit exactly once.",
            ),
            CommitConflictError => (
                &[Kstate(InvalidStateStoreError)],
                "Another writer published to the changelog at this offset first (first writer \
                 wins: two\nattempts of the same batch, or a writer that fell behind). Nothing of \
                 the commit was applied;\n``recover()`` drops its writes and brings the store to \
                 what the changelog holds (Kafka's\n``ProducerFencedException``).",
            ),
            CorruptedDataError => (
                &[Kstate(KStateError)],
                "Bytes read from disk, or received from another instance, do not have the layout \
                 their format\nrequires.",
            ),
            TaskAssignmentError => (
                &[Kstate(KStateError)],
                "Rebalance metadata that the group protocol cannot reconcile (Kafka's \
                 ``TaskAssignmentException``):\ne.g. a subscription newer than a pre-probing \
                 leader reads, or an assignment newer than the\nsubscription sent.",
            ),
            InvalidArgumentError => (
                &[Kstate(KStateError), Base::ValueError],
                "An argument or configuration value that can never be valid.",
            ),
            StateTypeError => (
                &[Kstate(InvalidArgumentError), Base::TypeError],
                "kstate.spark: a typed state value of a type its schema does not accept. A \
                 ``TypeError`` too,\nas Spark's type verifier raises one for it (a null where \
                 none may be, or an integer out of\nrange, is a plain \
                 ``InvalidArgumentError``: a ``ValueError``, as Spark's).",
            ),
            InvalidTimestampError => (
                &[Kstate(InvalidArgumentError)],
                "A log rejected a batch of records whose timestamps are out of the allowed range \
                 (Kafka's\n``INVALID_TIMESTAMP``, error 32); nothing of the batch was written.",
            ),
            SerializationError => (
                &[Kstate(KStateError), Base::ValueError],
                "A key or value could not be serialized or deserialized by its serde.",
            ),
            PartitioningError => (
                &[Kstate(KStateError)],
                "kstate.spark: rows or a query do not fit how the application's state is \
                 partitioned.",
            ),
            MisroutedRowsError => (
                &[Kstate(PartitioningError)],
                "A task got rows whose keys hash to another partition than the one it runs \
                 (adaptive query\nexecution coalescing partitions, a repartition on other \
                 columns or with another count, or\nnone): their state is elsewhere. The task \
                 commits nothing.",
            ),
            PartitioningChangedError => (
                &[Kstate(PartitioningError)],
                "A query's partition count or key columns differ from those the state was \
                 written with;\nkeep them, or rescale the state (``kstate rescale``).",
            ),
            SparkConnectUnsupportedError => (
                &[Kstate(KStateError)],
                "kstate.spark: a call that needs Spark's classic driver API (the \
                 ``SparkContext``: RDDs,\naccumulators) made with a Spark Connect session; the \
                 message names what works there.",
            ),
            JavaNotFoundError => (
                &[Kstate(KStateError)],
                "Spark cannot start: this machine has no Java runtime \
                 (``kstate.spark.local_session``).",
            ),
            StateSchemaError => (
                &[Kstate(KStateError)],
                "kstate.spark: a processor's state schemas cannot read the state stored with \
                 other schemas\n(an incompatible change), raised before the query starts; the \
                 state is untouched.",
            ),
            DeletedStateVariableError => (
                &[Kstate(KStateError), Base::RuntimeError],
                "kstate.spark: a call on a state variable after ``handle.deleteIfExists`` \
                 deleted it (Spark\nfails such calls too; kstate.spark raises a subclass that is \
                 also PySpark's\n``PySparkRuntimeError``, with Spark's message, so processors \
                 catching that work unchanged).",
            ),
        }
    }

    /// The class of a core error: one arm per kind, no default, nothing read from the message.
    pub fn of(error: &Error) -> ErrorClass {
        match error {
            Error::Closed(_) => StoreClosedError,
            Error::InvalidState(_) => InvalidStateStoreError,
            Error::StoreBehindChangelog(_) => StoreBehindChangelogError,
            Error::ChangelogTruncated(_) => ChangelogTruncatedError,
            Error::InvalidArgument(_) => InvalidArgumentError,
            Error::InvalidTimestamp(_) => InvalidTimestampError,
            Error::TaskAssignment(_) => TaskAssignmentError,
            Error::Corrupted(_) => CorruptedDataError,
            Error::Storage(_) => ProcessorStateError,
            Error::StorageCorrupted(_) => StoreCorruptedError,
        }
    }

    fn name(self) -> String {
        format!("{self:?}")
    }

    fn class(self, py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
        Ok(classes(py)?[self as usize].bind(py))
    }
}

static CLASSES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// The classes, created on first use, in `ErrorClass::ALL` order.
fn classes(py: Python<'_>) -> PyResult<&Vec<Py<PyType>>> {
    CLASSES.get_or_try_init(py, || {
        let mut created: Vec<Py<PyType>> = Vec::with_capacity(ErrorClass::ALL.len());
        for &class in ErrorClass::ALL {
            let (bases, doc) = class.definition();
            let bases = bases.iter().map(|base| match base {
                Kstate(parent) => created[*parent as usize].bind(py).clone(),
                Base::Exception => py.get_type::<PyException>(),
                Base::ValueError => py.get_type::<PyValueError>(),
                Base::TypeError => py.get_type::<PyTypeError>(),
                Base::RuntimeError => py.get_type::<PyRuntimeError>(),
            });
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "kstate.errors")?;
            namespace.set_item("__doc__", doc)?;
            let made = py.get_type::<PyType>().call1((
                class.name(),
                PyTuple::new(py, bases)?,
                namespace,
            ))?;
            created.push(made.cast_into::<PyType>()?.unbind());
        }
        Ok(created)
    })
}

/// Adds every class to `kstate._core` under its name.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    for &class in ErrorClass::ALL {
        module.add(class.name(), class.class(module.py())?)?;
    }
    Ok(())
}

/// An instance of `kstate.errors.<class>` with `message`.
pub fn raise(class: ErrorClass, message: String) -> PyErr {
    Python::attach(|py| match class.class(py) {
        Ok(class) => PyErr::from_type(class.clone(), message),
        Err(e) => e,
    })
}

/// A core error as its `kstate.errors` class, its message unchanged.
pub fn to_py(error: Error) -> PyErr {
    raise(ErrorClass::of(&error), error.to_string())
}

/// A failure of the core, not yet a Python exception: one is made only while attached.
enum Failure {
    Core(Error),
    Panic(String),
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> PyErr {
        match failure {
            Failure::Core(error) => to_py(error),
            Failure::Panic(what) => raise(
                KStateError,
                format!("internal error in kstate core: {what}"),
            ),
        }
    }
}

/// Runs `f`, catching a panic, so no Rust panic ever reaches Python as a `PanicException`.
fn caught<T>(f: impl FnOnce() -> kstate_core::Result<T>) -> Result<T, Failure> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(Failure::Core),
        Err(panic) => Err(Failure::Panic(
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into()),
        )),
    }
}

/// Runs `f`, turning a core error into its Python class and a panic into `KStateError`.
pub fn guard<T>(f: impl FnOnce() -> kstate_core::Result<T>) -> PyResult<T> {
    Ok(caught(f)?)
}

/// `guard` with the interpreter released while `f` runs (other Python threads go on). The
/// exception is made after re-attaching, never from the detached thread: a daemon thread whose
/// call fails while the interpreter exits would attach to a finalized one (a crash); re-attaching
/// is CPython's own path, which ends such a thread.
pub fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> kstate_core::Result<T> + Send,
) -> PyResult<T> {
    Ok(py.detach(|| caught(f))?)
}

/// Runs `f` attached from a detached thread (a Python callback mid-operation); while the
/// interpreter exits, `f` is not run and the error says so instead of crashing the process.
pub fn attached<R>(f: impl for<'py> FnOnce(Python<'py>) -> PyResult<R>) -> PyResult<R> {
    Python::try_attach(f).unwrap_or_else(|| {
        Err(PyRuntimeError::new_err(
            "the Python interpreter is exiting: a callback was not called",
        ))
    })
}
