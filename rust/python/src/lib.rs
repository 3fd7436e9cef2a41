//! `kstate._core`: the thin PyO3 layer over `kstate-core`. One file per Python module it serves.

use pyo3::prelude::*;

mod errors;
#[cfg(target_os = "linux")]
mod file_watch;
mod key_value_store;
mod logged;
mod memory;
mod partition;
mod progress;
mod rebalance;
mod records;
mod remote;
mod routed_reads;
mod row_codec;
mod session_store;
mod snapshots;
mod spark_hash;
mod state_layout;
mod state_variables;
mod text;
mod upgrade;
mod value_and_timestamp;
mod window_store;
mod windowed;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let missing = kstate_core::platform::missing_cpu_features();
    if !missing.is_empty() {
        return Err(pyo3::exceptions::PyImportError::new_err(format!(
            "this kstate build needs CPU features this CPU lacks: {} (x86-64 wheels use SSE4.2 \
             and PCLMUL, which every x86-64 server CPU since 2010 has)",
            missing.join(", ")
        )));
    }
    // `kstate.__version__`: the workspace version this module was built from, without
    // importlib.metadata (whose import costs more than the rest of `import kstate`).
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<key_value_store::NativeKeyValueStore>()?;
    #[cfg(target_os = "linux")]
    m.add_class::<file_watch::FileWatch>()?;
    m.add_class::<row_codec::RowCodec>()?;
    m.add_function(wrap_pyfunction!(row_codec::register_row_conversions, m)?)?;
    m.add_class::<row_codec::RowReader>()?;
    m.add_class::<state_variables::StateCodec>()?;
    m.add_class::<state_variables::StateReadAhead>()?;
    m.add_class::<state_variables::StateCursor>()?;
    m.add_class::<state_variables::MapCalls>()?;
    m.add_class::<state_variables::ListCalls>()?;
    m.add_class::<state_variables::TtlIndex>()?;
    m.add_class::<state_variables::ValueCalls>()?;
    m.add_function(wrap_pyfunction!(state_variables::sweep_expired_state, m)?)?;
    state_layout::register(m)?;
    m.add_class::<key_value_store::NativeReadCommittedView>()?;
    m.add_class::<routed_reads::RoutedViews>()?;
    m.add_class::<routed_reads::Seqlock>()?;
    m.add_class::<routed_reads::SnapshotRead>()?;
    m.add_class::<key_value_store::RangeIterator>()?;
    m.add_function(wrap_pyfunction!(key_value_store::retract_changelog, m)?)?;
    m.add_class::<partition::NativePartition>()?;
    m.add_function(wrap_pyfunction!(partition::records_deleted_before, m)?)?;
    m.add_class::<records::Record>()?;
    m.add_function(wrap_pyfunction!(records::register_timestamp_type, m)?)?;
    m.add_class::<records::RecordChunks>()?;
    m.add_class::<records::ColumnBuffer>()?;
    m.add_function(wrap_pyfunction!(records::encode_records, m)?)?;
    m.add_function(wrap_pyfunction!(records::decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(records::shallow_entries, m)?)?;
    m.add_function(wrap_pyfunction!(records::decode_record_columns, m)?)?;
    m.add_function(wrap_pyfunction!(records::encode_record_columns, m)?)?;
    m.add_class::<window_store::NativeWindowStore>()?;
    m.add_class::<window_store::NativeWindowView>()?;
    m.add_class::<session_store::NativeSessionStore>()?;
    m.add_class::<session_store::NativeSessionView>()?;
    m.add_class::<windowed::WindowedIterator>()?;
    m.add_function(wrap_pyfunction!(windowed::register_window_rows, m)?)?;
    m.add_function(wrap_pyfunction!(windowed::check_restored_segments, m)?)?;
    m.add_function(wrap_pyfunction!(windowed::install_restored_segments, m)?)?;
    m.add_function(wrap_pyfunction!(remote::compact_changelog_objects, m)?)?;
    m.add_class::<snapshots::NativeCommittedFiles>()?;
    m.add_class::<snapshots::NativeSnapshotManifest>()?;
    m.add_function(wrap_pyfunction!(
        value_and_timestamp::encode_value_and_timestamp,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        value_and_timestamp::decode_value_and_timestamp,
        m
    )?)?;
    m.add_class::<rebalance::NativeProbingMember>()?;
    m.add_class::<rebalance::NativeGroupSimulator>()?;
    for function in [
        wrap_pyfunction!(rebalance::encode_subscription, m)?,
        wrap_pyfunction!(rebalance::decode_subscription, m)?,
        wrap_pyfunction!(rebalance::encode_assignment, m)?,
        wrap_pyfunction!(rebalance::decode_assignment, m)?,
        wrap_pyfunction!(rebalance::upgrade_from_values, m)?,
        wrap_pyfunction!(rebalance::parse_upgrade_config, m)?,
        wrap_pyfunction!(rebalance::leader_plan, m)?,
    ] {
        m.add_function(function)?;
    }
    m.add_function(wrap_pyfunction!(spark_hash::spark_hash, m)?)?;
    m.add_function(wrap_pyfunction!(spark_hash::spark_partitions_of_values, m)?)?;
    m.add_function(wrap_pyfunction!(memory::check_memory_config, m)?)?;
    m.add_function(wrap_pyfunction!(memory::memory_budget_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(memory::process_memory, m)?)?;
    m.add_function(wrap_pyfunction!(upgrade::inspect_store, m)?)?;
    m.add_function(wrap_pyfunction!(upgrade::upgrade_store_to_timestamped, m)?)?;
    m.add_function(wrap_pyfunction!(upgrade::summarize_store, m)?)?;
    Ok(())
}
