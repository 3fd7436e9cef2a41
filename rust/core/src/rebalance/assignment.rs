//! `AssignmentInfo`, versions 1 to 11 (spec 2.4): what the group leader sends each member.
//!
//! Sets and maps are Java hash sets and maps on the wire, in no defined order; here they are
//! ordered (B-tree) collections, so encoding is deterministic and a decoded duplicate collapses
//! as it does in Java (the last map entry wins). Only `active_tasks` is a list: one task per
//! assigned partition, in the order of the member's sorted partitions.
//!
//! There is no escape hatch for newer versions: an AssignmentInfo of unknown version is an error.

use std::collections::{BTreeMap, BTreeSet};

use super::host_info::{HostInfo, TopicPartition};
use super::task_id::TaskId;
use super::wire::{Reader, Writer};
use super::{check_version, EARLIEST_PROBEABLE_VERSION, LATEST_SUPPORTED_VERSION, UNKNOWN};
use crate::error::{Error, Result};

/// `nextRebalanceMs` when no follow-up rebalance is scheduled (`Long.MAX_VALUE`).
pub const NO_NEXT_REBALANCE: i64 = i64::MAX;

const MIN_HOST_MAP_VERSION: i32 = 2;
const MIN_ERROR_CODE_VERSION: i32 = 4;
const MIN_TOPIC_DICTIONARY_VERSION: i32 = 5;
const MIN_STANDBY_HOST_MAP_VERSION: i32 = 6;
const MIN_NEXT_REBALANCE_VERSION: i32 = 7;

/// Host -> partitions, as in `partitionsByHost`.
pub type HostPartitions = BTreeMap<HostInfo, BTreeSet<TopicPartition>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentInfo {
    pub version: i32,
    /// Version 3+: the minimum latest version over the group's subscriptions (the leader's own
    /// latest before Kafka 2.4). [`UNKNOWN`] (-1) in versions 1 and 2.
    pub commonly_supported_version: i32,
    pub active_tasks: Vec<TaskId>,
    /// Standby task -> its source partitions.
    pub standby_tasks: BTreeMap<TaskId, BTreeSet<TopicPartition>>,
    /// Version 2+: active partitions of every instance with an endpoint.
    pub partitions_by_host: HostPartitions,
    /// Version 6+: standby partitions of every instance with an endpoint.
    pub standby_partitions_by_host: HostPartitions,
    /// Version 4+: an `AssignorError` code.
    pub error_code: i32,
    /// Version 7+: epoch ms of a scheduled probing rebalance, 0 = now, [`NO_NEXT_REBALANCE`].
    pub next_rebalance_ms: i64,
}

impl AssignmentInfo {
    /// An empty assignment; `commonly_supported_version` becomes [`UNKNOWN`] for versions 1-2.
    pub fn new(version: i32, commonly_supported_version: i32) -> Self {
        AssignmentInfo {
            version,
            commonly_supported_version: if version < EARLIEST_PROBEABLE_VERSION {
                UNKNOWN
            } else {
                commonly_supported_version
            },
            active_tasks: Vec::new(),
            standby_tasks: BTreeMap::new(),
            partitions_by_host: BTreeMap::new(),
            standby_partitions_by_host: BTreeMap::new(),
            error_code: 0,
            next_rebalance_ms: NO_NEXT_REBALANCE,
        }
    }

    /// Kafka's `errorAssignment`: latest version, no tasks, the error code.
    pub fn error_assignment(error_code: i32) -> Self {
        AssignmentInfo {
            error_code,
            ..Self::new(LATEST_SUPPORTED_VERSION, LATEST_SUPPORTED_VERSION)
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        let version = self.version;
        check_version(version, "AssignmentInfo")?;
        self.check_fits()?;

        let mut out = Writer::new();
        out.i32(version);
        if version >= EARLIEST_PROBEABLE_VERSION {
            out.i32(self.commonly_supported_version);
        }
        out.count(self.active_tasks.len(), "activeTasks")?;
        for task in &self.active_tasks {
            task.write_versioned(&mut out, version)?;
        }
        out.count(self.standby_tasks.len(), "standbyTasks")?;
        for (task, partitions) in &self.standby_tasks {
            task.write_versioned(&mut out, version)?;
            write_topic_partitions(&mut out, partitions)?;
        }
        if version >= MIN_TOPIC_DICTIONARY_VERSION {
            // Indices follow the sorted topic names and are written in index order; decoders
            // must map by index anyway, since Kafka writes them in hash order.
            let topics: BTreeSet<&str> = self
                .partitions_by_host
                .values()
                .chain(self.standby_partitions_by_host.values())
                .flatten()
                .map(|tp| tp.topic.as_str())
                .collect();
            let index_of: BTreeMap<&str, i32> = topics.iter().copied().zip(0..).collect();
            out.count(index_of.len(), "topic dictionary")?;
            for (topic, index) in &index_of {
                out.i32(*index);
                out.java_utf(topic, "topic dictionary topic")?;
            }
            write_host_map_with_dictionary(&mut out, &self.partitions_by_host, &index_of)?;
            if version >= MIN_STANDBY_HOST_MAP_VERSION {
                write_host_map_with_dictionary(
                    &mut out,
                    &self.standby_partitions_by_host,
                    &index_of,
                )?;
            }
        } else if version >= MIN_HOST_MAP_VERSION {
            out.count(self.partitions_by_host.len(), "partitionsByHost")?;
            for (host, partitions) in &self.partitions_by_host {
                write_host_info(&mut out, host)?;
                write_topic_partitions(&mut out, partitions)?;
            }
        }
        if version >= MIN_ERROR_CODE_VERSION {
            out.i32(self.error_code);
        }
        if version >= MIN_NEXT_REBALANCE_VERSION {
            out.i64(self.next_rebalance_ms);
        }
        Ok(out.out)
    }

    /// Rejects what this version cannot carry, so encoding never drops data silently.
    fn check_fits(&self) -> Result<()> {
        let version = self.version;
        let cannot = |what: &str, since: i32| {
            Err(Error::InvalidArgument(format!(
                "AssignmentInfo version {version} cannot carry {what} (needs version {since}+)"
            )))
        };
        if version < EARLIEST_PROBEABLE_VERSION && self.commonly_supported_version != UNKNOWN {
            return Err(Error::InvalidArgument(format!(
                "AssignmentInfo version {version} has no commonly_supported_version; it must be \
                 {UNKNOWN}, got {}",
                self.commonly_supported_version
            )));
        }
        if version < MIN_HOST_MAP_VERSION && !self.partitions_by_host.is_empty() {
            return cannot("partitions_by_host", MIN_HOST_MAP_VERSION);
        }
        if version < MIN_STANDBY_HOST_MAP_VERSION && !self.standby_partitions_by_host.is_empty() {
            return cannot("standby_partitions_by_host", MIN_STANDBY_HOST_MAP_VERSION);
        }
        if version < MIN_ERROR_CODE_VERSION && self.error_code != 0 {
            return cannot("an error_code", MIN_ERROR_CODE_VERSION);
        }
        if version < MIN_NEXT_REBALANCE_VERSION && self.next_rebalance_ms != NO_NEXT_REBALANCE {
            return cannot("a next_rebalance_ms", MIN_NEXT_REBALANCE_VERSION);
        }
        self.active_tasks
            .iter()
            .chain(self.standby_tasks.keys())
            .try_for_each(|task| task.check_fits(version, "AssignmentInfo tasks"))
    }

    /// Decodes with this library's [`LATEST_SUPPORTED_VERSION`].
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        Self::decode_as(bytes, LATEST_SUPPORTED_VERSION)
    }

    /// Decodes as a release whose latest version is `receiver_latest` would: any newer version
    /// is an error (Kafka's `TaskAssignmentException`).
    pub fn decode_as(bytes: &[u8], receiver_latest: i32) -> Result<Self> {
        check_version(receiver_latest, "decoder version")?;
        let mut reader = Reader::new(bytes, "AssignmentInfo");
        let version = reader.i32("version")?;
        if !(1..=receiver_latest).contains(&version) {
            return Err(reader.corrupted(
                "version",
                format!("unknown version {version}; this decoder reads 1 to {receiver_latest}"),
            ));
        }
        reader.set_context(format!("AssignmentInfo v{version}"));
        let commonly_supported_version = if version >= EARLIEST_PROBEABLE_VERSION {
            reader.i32("commonlySupportedVersion")?
        } else {
            UNKNOWN
        };
        let mut info = AssignmentInfo::new(version, commonly_supported_version);

        let task_size = TaskId::min_wire_size(version);
        for _ in 0..reader.count("activeTasks", task_size)? {
            let task = TaskId::read_versioned(&mut reader, version, "activeTasks")?;
            info.active_tasks.push(task);
        }
        for _ in 0..reader.count("standbyTasks", task_size + 4)? {
            let task = TaskId::read_versioned(&mut reader, version, "standbyTasks")?;
            let partitions = read_topic_partitions(&mut reader, "standbyTasks partitions")?;
            info.standby_tasks.insert(task, partitions);
        }
        if version >= MIN_TOPIC_DICTIONARY_VERSION {
            let mut topic_of_index = BTreeMap::new();
            // i32 index, u16 topic length: at least 6 bytes.
            for _ in 0..reader.count("topic dictionary", 6)? {
                let index = reader.i32("topic dictionary index")?;
                let topic = reader.java_utf("topic dictionary topic")?;
                topic_of_index.insert(index, topic);
            }
            info.partitions_by_host =
                read_host_map_with_dictionary(&mut reader, &topic_of_index, "partitionsByHost")?;
            if version >= MIN_STANDBY_HOST_MAP_VERSION {
                info.standby_partitions_by_host = read_host_map_with_dictionary(
                    &mut reader,
                    &topic_of_index,
                    "standbyPartitionsByHost",
                )?;
            }
        } else if version >= MIN_HOST_MAP_VERSION {
            // u16 host length, i32 port, i32 partition count: at least 10 bytes.
            for _ in 0..reader.count("partitionsByHost", 10)? {
                let host = read_host_info(&mut reader, "partitionsByHost host")?;
                let partitions = read_topic_partitions(&mut reader, "partitionsByHost partitions")?;
                info.partitions_by_host.insert(host, partitions);
            }
        }
        if version >= MIN_ERROR_CODE_VERSION {
            info.error_code = reader.i32("errCode")?;
        }
        if version >= MIN_NEXT_REBALANCE_VERSION {
            info.next_rebalance_ms = reader.i64("nextRebalanceMs")?;
        }
        reader.finish()?;
        Ok(info)
    }
}

fn write_host_info(out: &mut Writer, host: &HostInfo) -> Result<()> {
    out.java_utf(&host.host, "host")?;
    out.i32(host.port);
    Ok(())
}

fn read_host_info(reader: &mut Reader<'_>, field: &str) -> Result<HostInfo> {
    let host = reader.java_utf(field)?;
    let port = reader.i32(field)?;
    Ok(HostInfo { host, port })
}

/// `writeTopicPartitions`: i32 count, then (UTF topic, i32 partition) each.
fn write_topic_partitions(out: &mut Writer, partitions: &BTreeSet<TopicPartition>) -> Result<()> {
    out.count(partitions.len(), "topic partitions")?;
    for tp in partitions {
        out.java_utf(&tp.topic, "topic")?;
        out.i32(tp.partition);
    }
    Ok(())
}

fn read_topic_partitions(reader: &mut Reader<'_>, field: &str) -> Result<BTreeSet<TopicPartition>> {
    let mut partitions = BTreeSet::new();
    // u16 topic length, i32 partition: at least 6 bytes.
    for _ in 0..reader.count(field, 6)? {
        let topic = reader.java_utf(field)?;
        let partition = reader.i32(field)?;
        partitions.insert(TopicPartition { topic, partition });
    }
    Ok(partitions)
}

fn write_host_map_with_dictionary(
    out: &mut Writer,
    hosts: &HostPartitions,
    index_of: &BTreeMap<&str, i32>,
) -> Result<()> {
    out.count(hosts.len(), "host map")?;
    for (host, partitions) in hosts {
        write_host_info(out, host)?;
        out.count(partitions.len(), "host partitions")?;
        for tp in partitions {
            // Every topic of both host maps went into the dictionary.
            let index = index_of.get(tp.topic.as_str()).copied().ok_or_else(|| {
                Error::InvalidState(format!("topic {} missing from the dictionary", tp.topic))
            })?;
            out.i32(index);
            out.i32(tp.partition);
        }
    }
    Ok(())
}

fn read_host_map_with_dictionary(
    reader: &mut Reader<'_>,
    topic_of_index: &BTreeMap<i32, String>,
    field: &str,
) -> Result<HostPartitions> {
    let mut hosts = BTreeMap::new();
    // u16 host length, i32 port, i32 partition count: at least 10 bytes.
    for _ in 0..reader.count(field, 10)? {
        let host = read_host_info(reader, field)?;
        let mut partitions = BTreeSet::new();
        // i32 topic index, i32 partition.
        for _ in 0..reader.count(field, 8)? {
            let index = reader.i32(field)?;
            let partition = reader.i32(field)?;
            let topic = topic_of_index.get(&index).ok_or_else(|| {
                reader.corrupted(
                    field,
                    format!("topic index {index} is not in the dictionary"),
                )
            })?;
            partitions.insert(TopicPartition {
                topic: topic.clone(),
                partition,
            });
        }
        hosts.insert(host, partitions);
    }
    Ok(hosts)
}
