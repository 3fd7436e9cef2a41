//! Binds `kstate_core::rebalance` for `kstate.rebalance`: messages cross as plain tuples, which
//! the Python module turns into its frozen dataclasses. No protocol logic lives here.

use std::collections::{BTreeMap, BTreeSet};

use kstate_core::rebalance::simulator::{
    GroupSimulator, MemberRecord, RebalanceRecord, Release, SimulatorConfig,
};
use kstate_core::rebalance::{
    AssignmentInfo, DecodedSubscription, HostInfo, HostPartitions, Leader, Member, ProbingProtocol,
    SubscriptionInfo, SubscriptionVersions, TaskId, TopicPartition, UpgradeConfig, UpgradeFrom,
    VersionChange, UPGRADE_FROM_VALUES,
};
use kstate_core::Error;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::guard;

/// `(subtopology, partition, named_topology)`.
type TaskTuple = (i32, i32, Option<String>);
/// `(topic, partition)`.
type PartitionTuple = (String, i32);
/// `((host, port), [(topic, partition)])`.
type HostTuple = ((String, i32), Vec<PartitionTuple>);
/// `(version, latest, process_id, user_endpoint, [(task, offset_sum)], unique_field,
/// error_code, [(key, value)])`.
type SubscriptionTuple = (
    i32,
    i32,
    [u8; 16],
    Option<String>,
    Vec<(TaskTuple, i64)>,
    i8,
    i32,
    Vec<(String, String)>,
);
/// `(version, commonly, active, [(task, partitions)], partitions_by_host,
/// standby_partitions_by_host, error_code, next_rebalance_ms)`.
type AssignmentTuple = (
    i32,
    i32,
    Vec<TaskTuple>,
    Vec<(TaskTuple, Vec<PartitionTuple>)>,
    Vec<HostTuple>,
    Vec<HostTuple>,
    i32,
    i64,
);

/// `(upgrade_from, upgrade_mode, forced_subscription_version, eager)`.
type UpgradeConfigTuple = (
    Option<&'static str>,
    Option<&'static str>,
    Option<i32>,
    bool,
);
/// `(apply_assignment, rejoin, change)`; `change` is `(kind, from, to)`.
type ReactionTuple = (bool, bool, Option<(&'static str, i32, i32)>);

fn task(t: TaskTuple) -> TaskId {
    TaskId::named(t.0, t.1, t.2.as_deref().unwrap_or(""))
}

fn task_tuple(t: &TaskId) -> TaskTuple {
    (t.subtopology, t.partition, t.topology().map(str::to_string))
}

fn partitions(list: Vec<PartitionTuple>) -> BTreeSet<TopicPartition> {
    list.into_iter()
        .map(|(topic, partition)| TopicPartition { topic, partition })
        .collect()
}

fn partition_tuples(set: &BTreeSet<TopicPartition>) -> Vec<PartitionTuple> {
    set.iter()
        .map(|tp| (tp.topic.clone(), tp.partition))
        .collect()
}

fn hosts(list: Vec<HostTuple>) -> HostPartitions {
    list.into_iter()
        .map(|((host, port), list)| (HostInfo { host, port }, partitions(list)))
        .collect()
}

fn host_tuples(map: &HostPartitions) -> Vec<HostTuple> {
    map.iter()
        .map(|(h, set)| ((h.host.clone(), h.port), partition_tuples(set)))
        .collect()
}

fn process_id(bytes: &[u8]) -> kstate_core::Result<[u8; 16]> {
    bytes.try_into().map_err(|_| {
        Error::InvalidArgument(format!("process_id must be 16 bytes, got {}", bytes.len()))
    })
}

fn upgrade_from(value: Option<&str>) -> kstate_core::Result<Option<UpgradeFrom>> {
    value.map(UpgradeFrom::parse).transpose()
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (version, latest_supported_version, process_id_bytes, user_endpoint, task_offset_sums, unique_field, error_code, client_tags))]
pub fn encode_subscription<'py>(
    py: Python<'py>,
    version: i32,
    latest_supported_version: i32,
    process_id_bytes: &[u8],
    user_endpoint: Option<String>,
    task_offset_sums: Vec<(TaskTuple, i64)>,
    unique_field: i8,
    error_code: i32,
    client_tags: Vec<(String, String)>,
) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = guard(|| {
        SubscriptionInfo {
            version,
            latest_supported_version,
            process_id: process_id(process_id_bytes)?,
            user_endpoint,
            task_offset_sums: task_offset_sums
                .into_iter()
                .map(|(t, sum)| (task(t), sum))
                .collect(),
            unique_field,
            error_code,
            client_tags: client_tags.into_iter().collect(),
        }
        .encode()
    })?;
    Ok(PyBytes::new(py, &bytes))
}

/// `(version, latest, fields)`: `fields` is a [`SubscriptionTuple`], or `None` for a version
/// newer than this library reads.
#[pyfunction]
pub fn decode_subscription(data: &[u8]) -> PyResult<(i32, i32, Option<SubscriptionTuple>)> {
    Ok(match guard(|| SubscriptionInfo::decode(data))? {
        DecodedSubscription::Future {
            version,
            latest_supported_version,
        } => (version, latest_supported_version, None),
        DecodedSubscription::Known(info) => (
            info.version,
            info.latest_supported_version,
            Some((
                info.version,
                info.latest_supported_version,
                info.process_id,
                info.user_endpoint,
                info.task_offset_sums
                    .iter()
                    .map(|(t, sum)| (task_tuple(t), *sum))
                    .collect(),
                info.unique_field,
                info.error_code,
                info.client_tags.into_iter().collect(),
            )),
        ),
    })
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn encode_assignment<'py>(
    py: Python<'py>,
    version: i32,
    commonly_supported_version: i32,
    active_tasks: Vec<TaskTuple>,
    standby_tasks: Vec<(TaskTuple, Vec<PartitionTuple>)>,
    partitions_by_host: Vec<HostTuple>,
    standby_partitions_by_host: Vec<HostTuple>,
    error_code: i32,
    next_rebalance_ms: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let info = AssignmentInfo {
        version,
        commonly_supported_version,
        active_tasks: active_tasks.into_iter().map(task).collect(),
        standby_tasks: standby_tasks
            .into_iter()
            .map(|(t, list)| (task(t), partitions(list)))
            .collect(),
        partitions_by_host: hosts(partitions_by_host),
        standby_partitions_by_host: hosts(standby_partitions_by_host),
        error_code,
        next_rebalance_ms,
    };
    let bytes = guard(|| info.encode())?;
    Ok(PyBytes::new(py, &bytes))
}

fn assignment_tuple(info: &AssignmentInfo) -> AssignmentTuple {
    (
        info.version,
        info.commonly_supported_version,
        info.active_tasks.iter().map(task_tuple).collect(),
        info.standby_tasks
            .iter()
            .map(|(t, set)| (task_tuple(t), partition_tuples(set)))
            .collect(),
        host_tuples(&info.partitions_by_host),
        host_tuples(&info.standby_partitions_by_host),
        info.error_code,
        info.next_rebalance_ms,
    )
}

#[pyfunction]
pub fn decode_assignment(data: &[u8]) -> PyResult<AssignmentTuple> {
    Ok(assignment_tuple(&guard(|| AssignmentInfo::decode(data))?))
}

#[pyfunction]
pub fn upgrade_from_values() -> Vec<&'static str> {
    UPGRADE_FROM_VALUES.to_vec()
}

/// `(upgrade_from, upgrade_mode, forced_subscription_version, eager)` after validation; the
/// mode is `None` when `upgrade_from` is.
#[pyfunction]
#[pyo3(signature = (upgrade_from, upgrade_mode))]
pub fn parse_upgrade_config(
    upgrade_from: Option<&str>,
    upgrade_mode: Option<&str>,
) -> PyResult<UpgradeConfigTuple> {
    let config = guard(|| UpgradeConfig::parse(upgrade_from, upgrade_mode))?;
    let from = config.upgrade_from;
    Ok((
        from.map(UpgradeFrom::as_str),
        config.upgrade_mode.map(|m| m.as_str()),
        from.and_then(UpgradeFrom::forced_subscription_version),
        from.is_some_and(|f| {
            f.rebalance_protocol() == kstate_core::rebalance::RebalanceProtocol::Eager
        }),
    ))
}

/// `(assignment_version, commonly_supported_version, future_members, empty_for_future)`.
#[pyfunction]
pub fn leader_plan(
    latest_supported_version: i32,
    protocol: &str,
    subscriptions: Vec<(i32, i32)>,
) -> PyResult<(i32, i32, Vec<usize>, bool)> {
    let plan = guard(|| {
        let leader = Leader {
            latest_supported_version,
            protocol: ProbingProtocol::parse(protocol)?,
        };
        let versions: Vec<SubscriptionVersions> = subscriptions
            .into_iter()
            .map(|(version, latest_supported_version)| SubscriptionVersions {
                version,
                latest_supported_version,
            })
            .collect();
        leader.plan(&versions)
    })?;
    Ok((
        plan.assignment_version,
        plan.commonly_supported_version,
        plan.future_members,
        plan.future_members_get_empty_assignment,
    ))
}

/// One member's version state machine.
#[pyclass(name = "ProbingMember", module = "kstate._core")]
pub struct NativeProbingMember {
    member: Member,
}

#[pymethods]
impl NativeProbingMember {
    #[new]
    #[pyo3(signature = (latest_supported_version, upgrade_from, protocol))]
    fn new(
        latest_supported_version: i32,
        upgrade_from: Option<&str>,
        protocol: &str,
    ) -> PyResult<Self> {
        let member = guard(|| {
            Member::new(
                latest_supported_version,
                self::upgrade_from(upgrade_from)?,
                ProbingProtocol::parse(protocol)?,
            )
        })?;
        Ok(NativeProbingMember { member })
    }

    #[getter]
    fn used_version(&self) -> i32 {
        self.member.used_version()
    }

    #[getter]
    fn latest_supported_version(&self) -> i32 {
        self.member.latest_supported_version()
    }

    #[getter]
    fn advertised_latest_version(&self) -> i32 {
        self.member.advertised_latest_version()
    }

    /// `(apply_assignment, rejoin, change)`, `change` = `None` or `(kind, from, to)` with kind
    /// "upgraded" / "downgraded".
    fn on_assignment(
        &mut self,
        version: i32,
        commonly_supported_version: i32,
        next_rebalance_ms: i64,
    ) -> PyResult<ReactionTuple> {
        let assignment = AssignmentInfo {
            next_rebalance_ms,
            commonly_supported_version,
            ..AssignmentInfo::new(version, commonly_supported_version)
        };
        let reaction = guard(|| self.member.on_assignment(&assignment))?;
        let change = reaction.version_change.map(|change| match change {
            VersionChange::Upgraded { from, to } => ("upgraded", from, to),
            VersionChange::Downgraded { from, to } => ("downgraded", from, to),
        });
        Ok((reaction.apply_assignment, reaction.rejoin, change))
    }
}

/// `(name, release_version, subscription_version, advertised_latest_version, future,
/// assignment_version, commonly_supported_version, active, standby, used_version_after,
/// rejoin, crashed)`.
type MemberRecordTuple = (
    String,
    i32,
    i32,
    i32,
    bool,
    Option<i32>,
    Option<i32>,
    Vec<TaskTuple>,
    Vec<TaskTuple>,
    i32,
    bool,
    bool,
);
/// `(generation, cause, leader, probing, failure, violations, members)`.
type RecordTuple = (
    u32,
    String,
    String,
    bool,
    Option<String>,
    Vec<String>,
    Vec<MemberRecordTuple>,
);

fn member_tuple(m: &MemberRecord) -> MemberRecordTuple {
    (
        m.name.clone(),
        m.release_version,
        m.subscription_version,
        m.advertised_latest_version,
        m.future,
        m.assignment_version,
        m.commonly_supported_version,
        m.active_tasks.iter().map(task_tuple).collect(),
        m.standby_tasks.iter().map(task_tuple).collect(),
        m.used_version_after,
        m.rejoin,
        m.crashed,
    )
}

fn record_tuple(r: &RebalanceRecord) -> RecordTuple {
    (
        r.generation,
        r.cause.clone(),
        r.leader.clone(),
        r.probing,
        r.failure.clone(),
        r.violations.clone(),
        r.members.iter().map(member_tuple).collect(),
    )
}

/// The deterministic group simulator.
#[pyclass(name = "GroupSimulator", module = "kstate._core")]
pub struct NativeGroupSimulator {
    simulator: GroupSimulator,
}

fn release(
    latest_supported_version: i32,
    upgrade_from: Option<&str>,
) -> kstate_core::Result<Release> {
    Ok(Release {
        latest_supported_version,
        upgrade_from: self::upgrade_from(upgrade_from)?,
    })
}

#[pymethods]
impl NativeGroupSimulator {
    #[new]
    fn new(tasks: u32, standby_replicas: u32, protocol: &str) -> PyResult<Self> {
        let simulator = guard(|| {
            GroupSimulator::new(SimulatorConfig {
                tasks,
                standby_replicas,
                protocol: ProbingProtocol::parse(protocol)?,
            })
        })?;
        Ok(NativeGroupSimulator { simulator })
    }

    #[pyo3(signature = (name, latest_supported_version, upgrade_from))]
    fn start(
        &mut self,
        name: &str,
        latest_supported_version: i32,
        upgrade_from: Option<&str>,
    ) -> PyResult<usize> {
        guard(|| {
            let release = release(latest_supported_version, upgrade_from)?;
            self.simulator.start(name, release)
        })
    }

    fn stop(&mut self, name: &str) -> PyResult<usize> {
        guard(|| self.simulator.stop(name))
    }

    #[pyo3(signature = (name, latest_supported_version, upgrade_from))]
    fn bounce(
        &mut self,
        name: &str,
        latest_supported_version: i32,
        upgrade_from: Option<&str>,
    ) -> PyResult<usize> {
        guard(|| {
            let release = release(latest_supported_version, upgrade_from)?;
            self.simulator.bounce(name, release)
        })
    }

    fn crash_during_next_rebalance(&mut self, name: &str) -> PyResult<()> {
        guard(|| self.simulator.crash_during_next_rebalance(name))
    }

    fn rebalance(&mut self) -> PyResult<usize> {
        guard(|| self.simulator.rebalance())
    }

    fn leader(&self) -> Option<String> {
        self.simulator.leader().map(str::to_string)
    }

    fn members(&self) -> Vec<String> {
        self.simulator.members()
    }

    fn used_versions(&self) -> BTreeMap<String, i32> {
        self.simulator.used_versions()
    }

    fn settled_version(&self) -> Option<i32> {
        self.simulator.settled_version()
    }

    /// Records from rebalance number `start` (0-based) on.
    fn history(&self, start: usize) -> Vec<RecordTuple> {
        let history = self.simulator.history();
        history
            .get(start.min(history.len())..)
            .unwrap_or_default()
            .iter()
            .map(record_tuple)
            .collect()
    }
}
