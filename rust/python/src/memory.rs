//! Binds `kstate_core::store::memory_budget` and `rocks_options` for `kstate.memory`: the process's
//! budget and RocksDB options as stores open them, and what memory the process uses.

use std::sync::Arc;

use kstate_core::store::memory_budget::{
    check_limit, DEFAULT_MEMORY_MAX_BYTES, MIN_MEMORY_MAX_BYTES,
};
use kstate_core::{MemoryBudget, RocksConfig, StoreMemory};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{detached, guard};

/// The process's budget (`memory_max_bytes`: a store's `statestore.memory.max.bytes`, `None`
/// when not configured) with the store's RocksDB options (`name=value;...`), checked.
pub(crate) fn rocks_config(
    memory_max_bytes: Option<usize>,
    rocksdb_config: Option<&str>,
) -> kstate_core::Result<Arc<RocksConfig>> {
    RocksConfig::new(MemoryBudget::process(memory_max_bytes)?, rocksdb_config)
}

/// Checks a store's memory config without opening anything (a budget of its own, dropped).
#[pyfunction]
#[pyo3(signature = (memory_max_bytes=None, rocksdb_config=None))]
pub fn check_memory_config(
    memory_max_bytes: Option<usize>,
    rocksdb_config: Option<&str>,
) -> PyResult<()> {
    guard(|| {
        let limit = memory_max_bytes.unwrap_or(DEFAULT_MEMORY_MAX_BYTES);
        check_limit(limit)?;
        RocksConfig::new(MemoryBudget::new(limit)?, rocksdb_config).map(|_| ())
    })
}

/// `(default, minimum)` of `statestore.memory.max.bytes`.
#[pyfunction]
pub fn memory_budget_bounds() -> (usize, usize) {
    (DEFAULT_MEMORY_MAX_BYTES, MIN_MEMORY_MAX_BYTES)
}

pub(crate) fn store_memory_dict<'py>(
    py: Python<'py>,
    memory: &StoreMemory,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("memtables", memory.memtables)?;
    out.set_item("table_readers", memory.table_readers)?;
    out.set_item("sst_bytes", memory.sst_bytes)?;
    out.set_item("sst_files", memory.sst_files)?;
    out.set_item("staged", memory.staged)?;
    out.set_item("read_cache", memory.read_cache)?;
    Ok(out)
}

/// The process's memory as its budget counts it, with one entry per open store (a window or
/// session store's segments each count as one, listed if `stores`); `None` while no store is open.
#[pyfunction]
#[pyo3(signature = (stores=true))]
pub fn process_memory(py: Python<'_>, stores: bool) -> PyResult<Option<Bound<'_, PyDict>>> {
    let Some(budget) = MemoryBudget::current() else {
        return Ok(None);
    };
    let usage = budget.usage();
    let stores = if stores {
        detached(py, || budget.stores())?
    } else {
        Vec::new()
    };
    let out = PyDict::new(py);
    out.set_item("limit", usage.limit)?;
    out.set_item("block_cache_capacity", usage.block_cache_capacity)?;
    out.set_item("block_cache_usage", usage.block_cache_usage)?;
    out.set_item("block_cache_pinned", usage.block_cache_pinned)?;
    out.set_item("memtables", usage.memtables)?;
    out.set_item("memtable_limit", usage.memtable_limit)?;
    out.set_item("staged", usage.staged)?;
    out.set_item("staged_limit", usage.staged_limit)?;
    out.set_item("read_cache", usage.read_cache)?;
    out.set_item("read_cache_limit", usage.read_cache_limit)?;
    out.set_item("open_stores", usage.open_stores)?;
    let list = PyList::empty(py);
    for store in &stores {
        let entry = store_memory_dict(py, &store.memory)?;
        entry.set_item("name", &store.name)?;
        entry.set_item(
            "path",
            store
                .path
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
        )?;
        list.append(entry)?;
    }
    out.set_item("stores", list)?;
    Ok(Some(out))
}
