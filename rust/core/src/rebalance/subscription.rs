//! `SubscriptionInfo`, versions 1 to 11 (spec 2.3): what each member sends the group leader.
//!
//! One model for every version, as Kafka's `SubscriptionInfo` class has: the task state is a map
//! task -> offset sum. Versions 1-6 carry only two task sets; decoding them gives `prevTasks`
//! [`LATEST_OFFSET`] and `standbyTasks` [`UNKNOWN_OFFSET_SUM`], and encoding puts entries equal
//! to [`LATEST_OFFSET`] in `prevTasks` and all others in `standbyTasks`, as Kafka does.
//!
//! A subscription of a version newer than the decoder knows is read as its first two i32s only
//! ([`DecodedSubscription::Future`]): every version from 3 on starts with them, and version
//! probing depends on that.

use std::collections::BTreeMap;

use super::task_id::TaskId;
use super::wire::{Reader, Writer};
use super::{check_version, EARLIEST_PROBEABLE_VERSION, LATEST_SUPPORTED_VERSION, UNKNOWN};
use crate::error::{Error, Result};

/// `Task.LATEST_OFFSET`: the offset sum a running active task reports (and v1-6 `prevTasks`).
pub const LATEST_OFFSET: i64 = -2;
/// `SubscriptionInfo.UNKNOWN_OFFSET_SUM`: the offset sum v1-6 `standbyTasks` decode to.
pub const UNKNOWN_OFFSET_SUM: i64 = -3;

/// First version with `taskOffsetSums` instead of the two task sets.
const MIN_OFFSET_SUM_VERSION: i32 = 7;
const MIN_UNIQUE_FIELD_VERSION: i32 = 8;
const MIN_ERROR_CODE_VERSION: i32 = 9;
const MIN_FLAT_OFFSET_SUM_VERSION: i32 = 10;
const MIN_CLIENT_TAGS_VERSION: i32 = 11;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionInfo {
    pub version: i32,
    /// The sender's own latest version; [`UNKNOWN`] (-1) in versions 1 and 2, which lack it.
    pub latest_supported_version: i32,
    /// The instance's UUID, as 16 big-endian bytes (most significant i64 first).
    pub process_id: [u8; 16],
    /// `application.server` (`host:port`), version 2+. Sent as empty bytes when `None`; an empty
    /// endpoint decodes as `None`.
    pub user_endpoint: Option<String>,
    /// Task -> sum of its changelog offsets (see the module doc for versions 1-6).
    pub task_offset_sums: BTreeMap<TaskId, i64>,
    /// Version 8+: a counter that changes on every rejoin (wraps).
    pub unique_field: i8,
    /// Version 9+: an `AssignorError` code, e.g. 4 = shutdown requested.
    pub error_code: i32,
    /// Version 11+: `client.tag.*` configs (rack-aware standbys).
    pub client_tags: BTreeMap<String, String>,
}

/// What a subscription decodes to: a version the decoder knows, or the two version numbers of
/// a newer one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedSubscription {
    Known(SubscriptionInfo),
    Future {
        version: i32,
        latest_supported_version: i32,
    },
}

impl DecodedSubscription {
    pub fn version(&self) -> i32 {
        match self {
            DecodedSubscription::Known(info) => info.version,
            DecodedSubscription::Future { version, .. } => *version,
        }
    }

    pub fn latest_supported_version(&self) -> i32 {
        match self {
            DecodedSubscription::Known(info) => info.latest_supported_version,
            DecodedSubscription::Future {
                latest_supported_version,
                ..
            } => *latest_supported_version,
        }
    }
}

impl SubscriptionInfo {
    /// A subscription with no tasks, endpoint or tags; `latest_supported_version` is set to
    /// [`UNKNOWN`] for versions 1 and 2.
    pub fn new(version: i32, latest_supported_version: i32, process_id: [u8; 16]) -> Self {
        SubscriptionInfo {
            version,
            latest_supported_version: if version < EARLIEST_PROBEABLE_VERSION {
                UNKNOWN
            } else {
                latest_supported_version
            },
            process_id,
            user_endpoint: None,
            task_offset_sums: BTreeMap::new(),
            unique_field: 0,
            error_code: 0,
            client_tags: BTreeMap::new(),
        }
    }

    /// Kafka's `prevTasks()`: tasks whose offset sum is [`LATEST_OFFSET`] (running actives).
    pub fn prev_tasks(&self) -> impl Iterator<Item = &TaskId> {
        self.task_offset_sums
            .iter()
            .filter(|(_, &sum)| sum == LATEST_OFFSET)
            .map(|(task, _)| task)
    }

    /// Kafka's `standbyTasks()`: every other task with state.
    pub fn standby_tasks(&self) -> impl Iterator<Item = &TaskId> {
        self.task_offset_sums
            .iter()
            .filter(|(_, &sum)| sum != LATEST_OFFSET)
            .map(|(task, _)| task)
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        let version = self.version;
        check_version(version, "SubscriptionInfo")?;
        self.check_fits()?;

        let mut out = Writer::new();
        out.i32(version);
        if version >= EARLIEST_PROBEABLE_VERSION {
            out.i32(self.latest_supported_version);
        }
        out.out.extend_from_slice(&self.process_id);
        if version < MIN_OFFSET_SUM_VERSION {
            for tasks in [
                self.prev_tasks().collect::<Vec<_>>(),
                self.standby_tasks().collect(),
            ] {
                out.count(tasks.len(), "task set")?;
                tasks.iter().for_each(|task| task.write_plain(&mut out));
            }
        }
        if version >= 2 {
            let endpoint = self.user_endpoint.as_deref().unwrap_or("");
            out.bytes(endpoint.as_bytes(), "userEndPoint")?;
        }
        if version >= MIN_FLAT_OFFSET_SUM_VERSION {
            out.count(self.task_offset_sums.len(), "taskOffsetSums")?;
            for (task, sum) in &self.task_offset_sums {
                out.i32(task.subtopology);
                out.i32(task.partition);
                out.i64(*sum);
                out.nullable_string(task.topology(), "namedTopology")?;
            }
        } else if version >= MIN_OFFSET_SUM_VERSION {
            // Grouped by subtopology; the map's order keeps each group together.
            let mut by_subtopology: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
            for (task, sum) in &self.task_offset_sums {
                by_subtopology
                    .entry(task.subtopology)
                    .or_default()
                    .push((task.partition, *sum));
            }
            out.count(by_subtopology.len(), "taskOffsetSums")?;
            for (subtopology, partitions) in by_subtopology {
                out.i32(subtopology);
                out.count(partitions.len(), "partitionToOffsetSum")?;
                for (partition, sum) in partitions {
                    out.i32(partition);
                    out.i64(sum);
                }
            }
        }
        if version >= MIN_UNIQUE_FIELD_VERSION {
            out.i8(self.unique_field);
        }
        if version >= MIN_ERROR_CODE_VERSION {
            out.i32(self.error_code);
        }
        if version >= MIN_CLIENT_TAGS_VERSION {
            out.count(self.client_tags.len(), "clientTags")?;
            for (key, value) in &self.client_tags {
                out.bytes(key.as_bytes(), "clientTags key")?;
                out.bytes(value.as_bytes(), "clientTags value")?;
            }
        }
        Ok(out.out)
    }

    /// Rejects what this version cannot carry, so encoding never drops data silently.
    fn check_fits(&self) -> Result<()> {
        let version = self.version;
        let cannot = |what: &str, since: i32| {
            Err(Error::InvalidArgument(format!(
                "SubscriptionInfo version {version} cannot carry {what} (needs version {since}+)"
            )))
        };
        if version < EARLIEST_PROBEABLE_VERSION {
            if self.latest_supported_version != UNKNOWN {
                return Err(Error::InvalidArgument(format!(
                    "SubscriptionInfo version {version} has no latest_supported_version; it must \
                     be {UNKNOWN}, got {}",
                    self.latest_supported_version
                )));
            }
        } else if self.latest_supported_version < version {
            return Err(Error::InvalidArgument(format!(
                "SubscriptionInfo version {version} needs latest_supported_version >= \
                 {version}, got {}",
                self.latest_supported_version
            )));
        }
        if version < 2 && self.user_endpoint.as_deref().is_some_and(|e| !e.is_empty()) {
            return cannot("a user_endpoint", 2);
        }
        if version < MIN_UNIQUE_FIELD_VERSION && self.unique_field != 0 {
            return cannot("a unique_field", MIN_UNIQUE_FIELD_VERSION);
        }
        if version < MIN_ERROR_CODE_VERSION && self.error_code != 0 {
            return cannot("an error_code", MIN_ERROR_CODE_VERSION);
        }
        if version < MIN_CLIENT_TAGS_VERSION && !self.client_tags.is_empty() {
            return cannot("client_tags", MIN_CLIENT_TAGS_VERSION);
        }
        self.task_offset_sums
            .keys()
            .try_for_each(|task| task.check_fits(version, "SubscriptionInfo task_offset_sums"))
    }

    /// Decodes with this library's [`LATEST_SUPPORTED_VERSION`].
    pub fn decode(bytes: &[u8]) -> Result<DecodedSubscription> {
        Self::decode_as(bytes, LATEST_SUPPORTED_VERSION)
    }

    /// Decodes as a release whose latest version is `receiver_latest` would: newer versions are
    /// [`DecodedSubscription::Future`] for a prober (3+), an error for older releases, which
    /// could not read them (the reason for `upgrade.from`).
    pub fn decode_as(bytes: &[u8], receiver_latest: i32) -> Result<DecodedSubscription> {
        check_version(receiver_latest, "decoder version")?;
        let mut reader = Reader::new(bytes, "SubscriptionInfo");
        let version = reader.i32("version")?;
        if version < 1 {
            return Err(reader.corrupted("version", format!("unknown version {version}")));
        }
        if version > receiver_latest {
            if receiver_latest < EARLIEST_PROBEABLE_VERSION {
                return Err(reader.corrupted(
                    "version",
                    format!(
                        "version {version} is newer than this version {receiver_latest} decoder \
                         reads, and versions before {EARLIEST_PROBEABLE_VERSION} cannot probe"
                    ),
                ));
            }
            reader.set_context(format!("SubscriptionInfo v{version} (future)"));
            let latest_supported_version = reader.i32("latestSupportedVersion")?;
            return Ok(DecodedSubscription::Future {
                version,
                latest_supported_version,
            });
        }
        reader.set_context(format!("SubscriptionInfo v{version}"));
        decode_known(reader, version).map(DecodedSubscription::Known)
    }
}

fn decode_known(mut reader: Reader<'_>, version: i32) -> Result<SubscriptionInfo> {
    let latest_supported_version = if version >= EARLIEST_PROBEABLE_VERSION {
        let latest = reader.i32("latestSupportedVersion")?;
        if latest < version {
            return Err(reader.corrupted(
                "latestSupportedVersion",
                format!("{latest} is below the version {version}"),
            ));
        }
        latest
    } else {
        UNKNOWN
    };
    let mut info =
        SubscriptionInfo::new(version, latest_supported_version, reader.uuid("processId")?);
    if version < MIN_OFFSET_SUM_VERSION {
        // Later entries win, as in Kafka's map: a task in both sets counts as standby.
        for (field, sum) in [
            ("prevTasks", LATEST_OFFSET),
            ("standbyTasks", UNKNOWN_OFFSET_SUM),
        ] {
            for _ in 0..reader.count(field, 8)? {
                info.task_offset_sums
                    .insert(TaskId::read_plain(&mut reader, field)?, sum);
            }
        }
    }
    if version >= 2 {
        let endpoint = reader.utf8_bytes("userEndPoint")?;
        info.user_endpoint = (!endpoint.is_empty()).then_some(endpoint);
    }
    if version >= MIN_FLAT_OFFSET_SUM_VERSION {
        // i32 subtopology, i32 partition, i64 sum, string(i16) name: at least 18 bytes.
        for _ in 0..reader.count("taskOffsetSums", 18)? {
            let subtopology = reader.i32("taskOffsetSums subtopology")?;
            let partition = reader.i32("taskOffsetSums partition")?;
            let sum = reader.i64("taskOffsetSums offsetSum")?;
            let name = reader.nullable_string("taskOffsetSums namedTopology")?;
            let task = TaskId::named(subtopology, partition, name.as_deref().unwrap_or(""));
            info.task_offset_sums.insert(task, sum);
        }
    } else if version >= MIN_OFFSET_SUM_VERSION {
        for _ in 0..reader.count("taskOffsetSums", 8)? {
            let subtopology = reader.i32("taskOffsetSums subtopology")?;
            for _ in 0..reader.count("partitionToOffsetSum", 12)? {
                let partition = reader.i32("partitionToOffsetSum partition")?;
                let sum = reader.i64("partitionToOffsetSum offsetSum")?;
                info.task_offset_sums
                    .insert(TaskId::new(subtopology, partition), sum);
            }
        }
    }
    if version >= MIN_UNIQUE_FIELD_VERSION {
        info.unique_field = reader.i8("uniqueField")?;
    }
    if version >= MIN_ERROR_CODE_VERSION {
        info.error_code = reader.i32("errorCode")?;
    }
    if version >= MIN_CLIENT_TAGS_VERSION {
        for _ in 0..reader.count("clientTags", 8)? {
            let key = reader.utf8_bytes("clientTags key")?;
            let value = reader.utf8_bytes("clientTags value")?;
            info.client_tags.insert(key, value);
        }
    }
    reader.finish()?;
    Ok(info)
}
