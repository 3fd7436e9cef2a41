//! A deterministic Kafka Streams consumer group that runs rebalances through real bytes, to test
//! the codecs and the probing state machines together.
//!
//! Each instance runs a [`Release`] (the newest metadata version it knows, and `upgrade.from`).
//! A rebalance: every member encodes its subscription at the version it uses; the leader (the
//! longest-standing member) decodes them *as its own release would*, plans versions
//! ([`Leader::plan`]), places the tasks and encodes one assignment per member; each member
//! decodes its assignment as its release would and reacts ([`Member::on_assignment`]). Members
//! that ask to rejoin cause another rebalance, until the group settles.
//!
//! After every rebalance the simulator records violations of the group's invariants: every
//! task active on exactly one member, no member sent an assignment it cannot decode or that
//! decodes differently from what the leader meant, one active task per assigned partition, no
//! task both active and standby on one member, and every member's reaction valid.
//!
//! Versions above [`LATEST_SUPPORTED_VERSION`] are *simulated*: they use the version-11 layout
//! with the higher number in the header, which is what an older decoder sees of a real future
//! version (it must never read past the version fields).

use std::collections::{BTreeMap, BTreeSet};

use super::assignment::AssignmentInfo;
use super::host_info::{HostInfo, TopicPartition};
use super::probing::{Leader, Member, ProbingProtocol, SubscriptionVersions};
use super::subscription::{DecodedSubscription, SubscriptionInfo, LATEST_OFFSET};
use super::task_id::TaskId;
use super::upgrade_from::UpgradeFrom;
use super::{LATEST_SUPPORTED_VERSION, UNKNOWN};
use crate::error::{Error, Result};

/// The one source topic: task `0_p` reads its partition `p`.
pub const SOURCE_TOPIC: &str = "input";
/// Rebalances one event may take before the simulator calls the group unsettled.
pub const MAX_REBALANCES_PER_EVENT: usize = 6;

/// The code an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The newest metadata version the release reads and writes; above 11 it is simulated.
    pub latest_supported_version: i32,
    pub upgrade_from: Option<UpgradeFrom>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatorConfig {
    /// Tasks `0_0 .. 0_(tasks-1)`.
    pub tasks: u32,
    /// 0 or 1 standby per task (on another member when there is one).
    pub standby_replicas: u32,
    pub protocol: ProbingProtocol,
}

/// One member's part in one rebalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub name: String,
    /// The release's latest version (what it can read).
    pub release_version: i32,
    pub subscription_version: i32,
    /// The subscription's `latestSupportedVersion` field ([`UNKNOWN`] in versions 1-2).
    pub advertised_latest_version: i32,
    /// The leader could not read this subscription beyond its version numbers.
    pub future: bool,
    /// `None` when no assignment reached the member (it or the leader crashed, or the leader
    /// could not assign).
    pub assignment_version: Option<i32>,
    pub commonly_supported_version: Option<i32>,
    pub active_tasks: Vec<TaskId>,
    pub standby_tasks: Vec<TaskId>,
    /// The version the member will subscribe with next.
    pub used_version_after: i32,
    pub rejoin: bool,
    pub crashed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceRecord {
    /// 1, 2, ... over the simulator's life.
    pub generation: u32,
    /// What caused the rebalance, e.g. "start b", "bounce a", "probing follow-up".
    pub cause: String,
    pub leader: String,
    pub members: Vec<MemberRecord>,
    /// The leader received a subscription newer than it reads.
    pub probing: bool,
    /// The leader could not assign (Kafka's assignor throws; the group is stuck).
    pub failure: Option<String>,
    pub violations: Vec<String>,
}

struct Instance {
    name: String,
    release: Release,
    member: Member,
    process_id: [u8; 16],
    endpoint: String,
    unique_field: i8,
    active: BTreeSet<TaskId>,
    standby: BTreeSet<TaskId>,
    /// Dies in its next rebalance, right after sending its subscription.
    crash_armed: bool,
}

/// What the leader means to send one member.
struct PlannedAssignment {
    info: AssignmentInfo,
    partitions: Vec<TopicPartition>,
}

pub struct GroupSimulator {
    config: SimulatorConfig,
    /// Live members in join order: the first is the leader.
    instances: Vec<Instance>,
    next_process_id: u128,
    history: Vec<RebalanceRecord>,
}

impl GroupSimulator {
    pub fn new(config: SimulatorConfig) -> Result<Self> {
        if config.tasks == 0 || config.standby_replicas > 1 {
            return Err(Error::InvalidArgument(format!(
                "simulator needs tasks >= 1 and standby_replicas 0 or 1, got {} and {}",
                config.tasks, config.standby_replicas
            )));
        }
        Ok(GroupSimulator {
            config,
            instances: Vec::new(),
            next_process_id: 1,
            history: Vec::new(),
        })
    }

    pub fn history(&self) -> &[RebalanceRecord] {
        &self.history
    }

    /// Names of the live members in join order (the first leads).
    pub fn members(&self) -> Vec<String> {
        self.instances.iter().map(|i| i.name.clone()).collect()
    }

    pub fn leader(&self) -> Option<&str> {
        self.instances.first().map(|i| i.name.as_str())
    }

    /// The version each live member subscribes with next.
    pub fn used_versions(&self) -> BTreeMap<String, i32> {
        self.instances
            .iter()
            .map(|i| (i.name.clone(), i.member.used_version()))
            .collect()
    }

    /// The version the group settled on: the last rebalance succeeded, nobody asked to rejoin
    /// and every member sent and received that version.
    pub fn settled_version(&self) -> Option<i32> {
        let last = self.history.last()?;
        if last.failure.is_some() || last.members.iter().any(|m| m.rejoin || m.crashed) {
            return None;
        }
        let version = last.members.first()?.assignment_version?;
        last.members
            .iter()
            .all(|m| m.subscription_version == version && m.assignment_version == Some(version))
            .then_some(version)
    }

    /// A new instance joins; returns the number of rebalances until the group settled.
    pub fn start(&mut self, name: &str, release: Release) -> Result<usize> {
        if self.instances.iter().any(|i| i.name == name) {
            return Err(Error::InvalidArgument(format!(
                "instance {name} is already running"
            )));
        }
        let member = Member::new(
            release.latest_supported_version,
            release.upgrade_from,
            self.config.protocol,
        )?;
        let process_id = self.next_process_id.to_be_bytes();
        self.next_process_id += 1;
        self.instances.push(Instance {
            name: name.to_string(),
            release,
            member,
            process_id,
            endpoint: format!("{name}:8080"),
            unique_field: 0,
            active: BTreeSet::new(),
            standby: BTreeSet::new(),
            crash_armed: false,
        });
        self.rebalance_until_settled(&format!("start {name}"))
    }

    /// An instance leaves (a clean shutdown, or a crash noticed at the session timeout).
    pub fn stop(&mut self, name: &str) -> Result<usize> {
        let position = self.position(name)?;
        self.instances.remove(position);
        self.rebalance_until_settled(&format!("stop {name}"))
    }

    /// Stop, then start with `release`: one step of a rolling bounce.
    pub fn bounce(&mut self, name: &str, release: Release) -> Result<usize> {
        Ok(self.stop(name)? + self.start(name, release)?)
    }

    /// The instance will die in the next rebalance, after sending its subscription and before
    /// it receives an assignment (a crash in the middle of an upgrade step).
    pub fn crash_during_next_rebalance(&mut self, name: &str) -> Result<()> {
        let position = self.position(name)?;
        self.instances[position].crash_armed = true;
        Ok(())
    }

    /// A rebalance nobody asked for (e.g. a scheduled probing rebalance).
    pub fn rebalance(&mut self) -> Result<usize> {
        self.rebalance_until_settled("rebalance")
    }

    fn position(&self, name: &str) -> Result<usize> {
        self.instances
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| Error::InvalidArgument(format!("no running instance {name}")))
    }

    fn rebalance_until_settled(&mut self, cause: &str) -> Result<usize> {
        let mut cause = cause.to_string();
        for count in 1..=MAX_REBALANCES_PER_EVENT {
            if self.instances.is_empty() {
                return Ok(count - 1);
            }
            let record = self.rebalance_once(&cause)?;
            let again =
                record.failure.is_none() && record.members.iter().any(|m| m.rejoin || m.crashed);
            self.history.push(record);
            if !again {
                return Ok(count);
            }
            cause = "follow-up".into();
        }
        if let Some(last) = self.history.last_mut() {
            last.violations.push(format!(
                "the group did not settle within {MAX_REBALANCES_PER_EVENT} rebalances"
            ));
        }
        Ok(MAX_REBALANCES_PER_EVENT)
    }

    fn rebalance_once(&mut self, cause: &str) -> Result<RebalanceRecord> {
        let generation = self.history.len() as u32 + 1;
        let mut subscriptions = Vec::with_capacity(self.instances.len());
        for instance in &mut self.instances {
            subscriptions.push(encode_subscription(&instance.subscription())?);
        }
        let mut record = RebalanceRecord {
            generation,
            cause: cause.to_string(),
            leader: self.instances[0].name.clone(),
            members: self.instances.iter().map(Instance::record).collect(),
            probing: false,
            failure: None,
            violations: Vec::new(),
        };
        for (member, instance) in record.members.iter_mut().zip(&self.instances) {
            member.crashed = instance.crash_armed;
        }

        let outcome = if self.instances[0].crash_armed {
            Ok(None)
        } else {
            self.assign(&subscriptions, &mut record)
        };
        match outcome {
            Ok(Some(planned)) => self.deliver(planned, &mut record),
            Ok(None) => {} // the leader died before sending assignments: everyone rejoins
            Err(error) => record.failure = Some(error.to_string()),
        }
        self.instances.retain(|i| !i.crash_armed);
        Ok(record)
    }

    /// The leader's side: decode, plan versions, place tasks, build each member's assignment.
    fn assign(
        &self,
        subscriptions: &[Vec<u8>],
        record: &mut RebalanceRecord,
    ) -> Result<Option<Vec<PlannedAssignment>>> {
        let leader_release = self.instances[0].release;
        let decoded = subscriptions
            .iter()
            .map(|bytes| decode_subscription(bytes, leader_release.latest_supported_version))
            .collect::<Result<Vec<_>>>()?;
        let versions: Vec<SubscriptionVersions> = decoded
            .iter()
            .map(|s| SubscriptionVersions {
                version: s.version(),
                latest_supported_version: s.latest_supported_version(),
            })
            .collect();
        let leader = Leader {
            latest_supported_version: leader_release.latest_supported_version,
            protocol: self.config.protocol,
        };
        let plan = leader.plan(&versions)?;
        record.probing = plan.is_probing();
        for &i in &plan.future_members {
            record.members[i].future = true;
        }

        // Clients: one per readable subscription; future members (whose process id the leader
        // cannot read) share one client, as Kafka's FUTURE_ID does, unless KIP-268 leaves them
        // out with an empty assignment.
        let mut clients: Vec<Vec<usize>> = Vec::new();
        let mut future_client = Vec::new();
        for (i, subscription) in decoded.iter().enumerate() {
            match subscription {
                DecodedSubscription::Known(_) => clients.push(vec![i]),
                DecodedSubscription::Future { .. } => future_client.push(i),
            }
        }
        if !future_client.is_empty() && !plan.future_members_get_empty_assignment {
            clients.push(future_client);
        }
        let mut active: Vec<Vec<TaskId>> = vec![Vec::new(); decoded.len()];
        let mut standby: Vec<Vec<TaskId>> = vec![Vec::new(); decoded.len()];
        for (t, task) in (0..self.config.tasks).map(|t| (t as usize, TaskId::new(0, t as i32))) {
            let client = &clients[t % clients.len()];
            active[client[(t / clients.len()) % client.len()]].push(task.clone());
            if self.config.standby_replicas > 0 && clients.len() > 1 {
                let client = &clients[(t + 1) % clients.len()];
                standby[client[(t / clients.len()) % client.len()]].push(task);
            }
        }

        // Interactive-query host maps, of members whose endpoint the leader could read.
        let host_map = |tasks: &[Vec<TaskId>]| {
            let mut hosts = BTreeMap::new();
            for (i, subscription) in decoded.iter().enumerate() {
                let DecodedSubscription::Known(info) = subscription else {
                    continue;
                };
                if let Some(host) = info
                    .user_endpoint
                    .as_deref()
                    .and_then(|e| HostInfo::parse(e).ok())
                {
                    hosts.insert(host, tasks[i].iter().map(source_partition).collect());
                }
            }
            hosts
        };
        let partitions_by_host = host_map(&active);
        let standby_partitions_by_host = host_map(&standby);

        let mut planned = Vec::with_capacity(decoded.len());
        for i in 0..decoded.len() {
            if plan.future_members_get_empty_assignment && plan.future_members.contains(&i) {
                planned.push(PlannedAssignment {
                    info: leader.probing_assignment(),
                    partitions: Vec::new(),
                });
                continue;
            }
            let version = plan.assignment_version;
            let mut info = AssignmentInfo::new(version, plan.commonly_supported_version);
            // Tasks are 0_p, so sorting by partition is the consumer's sorted partition order.
            active[i].sort();
            info.active_tasks = active[i].clone();
            info.standby_tasks = standby[i]
                .iter()
                .map(|task| (task.clone(), BTreeSet::from([source_partition(task)])))
                .collect();
            if version >= 2 {
                info.partitions_by_host = partitions_by_host.clone();
            }
            if version >= 6 {
                info.standby_partitions_by_host = standby_partitions_by_host.clone();
            }
            if plan.is_probing() && version >= 7 {
                info.next_rebalance_ms = 0; // Kafka 2.6+: probing asks for a follow-up now
            }
            planned.push(PlannedAssignment {
                partitions: active[i].iter().map(source_partition).collect(),
                info,
            });
        }
        Ok(Some(planned))
    }

    /// The members' side: each decodes its bytes as its release would and reacts.
    fn deliver(&mut self, planned: Vec<PlannedAssignment>, record: &mut RebalanceRecord) {
        check_task_placement(
            &planned,
            &record.members,
            self.config.tasks,
            &mut record.violations,
        );
        for ((instance, plan), member) in self
            .instances
            .iter_mut()
            .zip(planned)
            .zip(record.members.iter_mut())
        {
            if instance.crash_armed {
                continue;
            }
            let name = &instance.name;
            let release_version = instance.release.latest_supported_version;
            let received = encode_assignment(&plan.info)
                .and_then(|bytes| decode_assignment(&bytes, release_version));
            let decoded = match received {
                Ok(decoded) => decoded,
                Err(error) => {
                    record.violations.push(format!(
                        "{name} (reads up to version {release_version}) was sent an assignment \
                         it cannot decode: {error}"
                    ));
                    continue;
                }
            };
            if decoded != plan.info {
                record.violations.push(format!(
                    "{name} decoded {decoded:?}, but the leader sent {:?}",
                    plan.info
                ));
            }
            if decoded.active_tasks.len() != plan.partitions.len() {
                record.violations.push(format!(
                    "{name} got {} active tasks for {} partitions",
                    decoded.active_tasks.len(),
                    plan.partitions.len()
                ));
            }
            member.assignment_version = Some(decoded.version);
            member.commonly_supported_version = Some(decoded.commonly_supported_version);
            match instance.member.on_assignment(&decoded) {
                Ok(reaction) => {
                    member.rejoin = reaction.rejoin;
                    // Eager rebalancing: a member owns exactly what it applied.
                    instance.active.clear();
                    instance.standby.clear();
                    if reaction.apply_assignment {
                        instance.active.extend(decoded.active_tasks.iter().cloned());
                        instance
                            .standby
                            .extend(decoded.standby_tasks.keys().cloned());
                    }
                }
                Err(error) => record
                    .violations
                    .push(format!("{name} rejected its assignment: {error}")),
            }
            member.active_tasks = instance.active.iter().cloned().collect();
            member.standby_tasks = instance.standby.iter().cloned().collect();
            member.used_version_after = instance.member.used_version();
        }
    }
}

impl Instance {
    /// The subscription at the version in use, with what that version can carry. Bumps the
    /// unique field, as Kafka does on every subscription.
    fn subscription(&mut self) -> SubscriptionInfo {
        let version = self.member.used_version();
        let mut info = SubscriptionInfo::new(
            version,
            self.member.advertised_latest_version(),
            self.process_id,
        );
        if version >= 2 {
            info.user_endpoint = Some(self.endpoint.clone());
        }
        for task in &self.active {
            info.task_offset_sums.insert(task.clone(), LATEST_OFFSET);
        }
        for task in &self.standby {
            info.task_offset_sums
                .insert(task.clone(), 1_000 + i64::from(task.partition));
        }
        if version >= 8 {
            self.unique_field = self.unique_field.wrapping_add(1);
            info.unique_field = self.unique_field;
        }
        if version >= 11 {
            let zone = format!("zone-{}", self.process_id[15] % 2);
            info.client_tags.insert("zone".into(), zone);
        }
        info
    }

    fn record(&self) -> MemberRecord {
        MemberRecord {
            name: self.name.clone(),
            release_version: self.release.latest_supported_version,
            subscription_version: self.member.used_version(),
            advertised_latest_version: self.member.advertised_latest_version(),
            future: false,
            assignment_version: None,
            commonly_supported_version: None,
            active_tasks: Vec::new(),
            standby_tasks: Vec::new(),
            used_version_after: self.member.used_version(),
            rejoin: false,
            crashed: false,
        }
    }
}

fn source_partition(task: &TaskId) -> TopicPartition {
    TopicPartition::new(SOURCE_TOPIC, task.partition)
}

/// Every task active exactly once over what the leader sent; nobody standby for its own task.
fn check_task_placement(
    planned: &[PlannedAssignment],
    members: &[MemberRecord],
    tasks: u32,
    violations: &mut Vec<String>,
) {
    let mut owners: BTreeMap<TaskId, Vec<&str>> = BTreeMap::new();
    for (plan, member) in planned.iter().zip(members) {
        for task in &plan.info.active_tasks {
            owners.entry(task.clone()).or_default().push(&member.name);
            if plan.info.standby_tasks.contains_key(task) {
                violations.push(format!(
                    "{} holds {task} both active and standby",
                    member.name
                ));
            }
        }
    }
    for task in (0..tasks as i32).map(|p| TaskId::new(0, p)) {
        match owners.get(&task).map(Vec::as_slice) {
            Some([_]) => {}
            Some(names) => violations.push(format!("task {task} is active on {names:?}")),
            None => violations.push(format!("task {task} is not assigned")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Simulated future versions: the version-11 layout with a higher number in the header.

/// The header version of metadata bytes, if there are 4 of them.
fn header_version(bytes: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}

fn with_header_version(mut bytes: Vec<u8>, version: i32) -> Vec<u8> {
    bytes[..4].copy_from_slice(&version.to_be_bytes());
    bytes
}

fn encode_subscription(info: &SubscriptionInfo) -> Result<Vec<u8>> {
    if info.version <= LATEST_SUPPORTED_VERSION {
        return info.encode();
    }
    let layout = SubscriptionInfo {
        version: LATEST_SUPPORTED_VERSION,
        ..info.clone()
    };
    Ok(with_header_version(layout.encode()?, info.version))
}

fn decode_subscription(bytes: &[u8], receiver_latest: i32) -> Result<DecodedSubscription> {
    let version = header_version(bytes).unwrap_or(UNKNOWN);
    if receiver_latest <= LATEST_SUPPORTED_VERSION
        || !(LATEST_SUPPORTED_VERSION + 1..=receiver_latest).contains(&version)
    {
        return SubscriptionInfo::decode_as(bytes, receiver_latest.min(LATEST_SUPPORTED_VERSION));
    }
    let layout = with_header_version(bytes.to_vec(), LATEST_SUPPORTED_VERSION);
    match SubscriptionInfo::decode(&layout)? {
        DecodedSubscription::Known(info) => Ok(DecodedSubscription::Known(SubscriptionInfo {
            version,
            ..info
        })),
        future => Ok(future),
    }
}

fn encode_assignment(info: &AssignmentInfo) -> Result<Vec<u8>> {
    if info.version <= LATEST_SUPPORTED_VERSION {
        return info.encode();
    }
    let layout = AssignmentInfo {
        version: LATEST_SUPPORTED_VERSION,
        ..info.clone()
    };
    Ok(with_header_version(layout.encode()?, info.version))
}

fn decode_assignment(bytes: &[u8], receiver_latest: i32) -> Result<AssignmentInfo> {
    let version = header_version(bytes).unwrap_or(UNKNOWN);
    if receiver_latest <= LATEST_SUPPORTED_VERSION
        || !(LATEST_SUPPORTED_VERSION + 1..=receiver_latest).contains(&version)
    {
        return AssignmentInfo::decode_as(bytes, receiver_latest.min(LATEST_SUPPORTED_VERSION));
    }
    let layout = with_header_version(bytes.to_vec(), LATEST_SUPPORTED_VERSION);
    Ok(AssignmentInfo {
        version,
        ..AssignmentInfo::decode(&layout)?
    })
}
