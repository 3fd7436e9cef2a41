//! A store with its changelog on real RocksDB and a real log directory, without Python.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kstate_core::format::checkpoint::OffsetCheckpoint;
use kstate_core::log::{filename_prefix, LogConfig, NewRecord, Partition};
use kstate_core::logged::changelog::{Changelog, Publisher};
use kstate_core::logged::logged_store::{CommitStage, LoggedStore, StoreChangelog};
use kstate_core::record::{decode_records, Compression, Magic, MessageSetBuilder};
use kstate_core::{Direction, Error, KeyRange, KeyValueStore, StoreOptions, ValueFormat};

const TOPIC: &str = "app-s-changelog";

fn ts_value(ts: i64, raw: &[u8]) -> Vec<u8> {
    [&ts.to_be_bytes()[..], raw].concat()
}

fn open(task: &Path, log_dir: &Path, max_uncommitted_bytes: usize) -> (LoggedStore, u64) {
    let options = StoreOptions {
        transactional: true,
        max_uncommitted_bytes,
        offset_key: format!("{TOPIC}-0"),
        cache_max_bytes: 1 << 20,
        rocks: None,
        durability: Default::default(),
    };
    let (store, _) = KeyValueStore::open_rocksdb(
        "s",
        &task.join("rocksdb/s"),
        &task.join("rocksdb/.s.uncommitted"),
        ValueFormat::Timestamped,
        options,
        &mut |_| {},
    )
    .unwrap();
    let (changelog, _) =
        Changelog::open(&log_dir.join(format!("{TOPIC}-0")), LogConfig::default()).unwrap();
    let changelog = StoreChangelog {
        changelog,
        checkpoint: Some(OffsetCheckpoint::in_task_dir(task)),
        topic: TOPIC.into(),
        partition: 0,
        timestamped: true,
    };
    LoggedStore::logged(store, changelog, &mut |_, _| {}).unwrap()
}

fn contents(store: &LoggedStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .store
        .scan(&KeyRange::all(), Direction::Forward, usize::MAX)
        .unwrap()
}

fn commit(store: &mut LoggedStore) -> (Option<i64>, Vec<CommitStage>) {
    let mut stages = Vec::new();
    let offset = store
        .commit(None, 99, &mut |_| {}, &mut |s| stages.push(s))
        .unwrap();
    (offset, stages)
}

#[test]
fn commits_publish_kafka_changelog_records_then_the_store_then_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let (mut store, restored) = open(&task, &logs, 1 << 20);
    assert_eq!(restored, 0);
    store.store.put(b"a", Some(&ts_value(5, b"one"))).unwrap();
    store.store.put(b"b", Some(&ts_value(6, b"two"))).unwrap();
    let (offset, stages) = commit(&mut store);
    assert_eq!(offset, Some(1));
    assert_eq!(
        stages,
        [
            CommitStage::Published,
            CommitStage::StoreCommitted,
            CommitStage::Checkpointed
        ]
    );
    store.store.put(b"a", None).unwrap();
    assert_eq!(commit(&mut store).0, Some(2));
    assert_eq!(store.store.committed_offset().unwrap(), Some(2));
    let checkpoint = OffsetCheckpoint::in_task_dir(&task).read().unwrap();
    assert_eq!(checkpoint[&(TOPIC.to_string(), 0)], 2);
    store.close().unwrap();

    // Spec 1.3: raw values without the timestamp prefix, record timestamp = stored timestamp,
    // a delete is a null value stamped with the commit time.
    let (log, _) = Partition::open(logs.join(format!("{TOPIC}-0")), LogConfig::default()).unwrap();
    let records = log.read_records(0, 1 << 20).unwrap();
    let seen: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.offset,
                r.timestamp,
                r.key.clone().unwrap(),
                r.value.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (0, 5, b"a".to_vec(), Some(b"one".to_vec())),
            (1, 6, b"b".to_vec(), Some(b"two".to_vec())),
            (2, 99, b"a".to_vec(), None),
        ]
    );
}

#[test]
fn a_wiped_state_dir_restores_from_the_changelog() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let (mut store, _) = open(&task, &logs, 300);
    for round in 0..3i64 {
        for i in 0..40 {
            let key = format!("k{i:02}");
            store
                .store
                .put(
                    key.as_bytes(),
                    Some(&ts_value(round, format!("{round}").as_bytes())),
                )
                .unwrap();
        }
        store.store.put(b"k07", None).unwrap();
        commit(&mut store);
    }
    let before = contents(&store);
    store.close().unwrap();
    std::fs::remove_dir_all(&task).unwrap();

    let (store, restored) = open(&task, &logs, 300);
    assert_eq!(
        restored,
        3 * 40,
        "k07's staged delete replaced its put: 40 records a round"
    );
    assert_eq!(contents(&store), before);
    assert_eq!(store.store.committed_offset().unwrap(), Some(3 * 40 - 1));
}

#[test]
fn records_that_never_published_are_cut_and_recover_replays_what_did() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let partition_dir = logs.join(format!("{TOPIC}-0"));
    let (mut store, _) = open(&task, &logs, 1 << 20);
    store.store.put(b"a", Some(&ts_value(1, b"1"))).unwrap();
    commit(&mut store);
    store.close().unwrap();

    // A writer that crashed after appending a commit's records but before publishing them.
    let (mut changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    let torn = [NewRecord {
        timestamp: 2,
        key: Some(b"x"),
        value: Some(b"lost"),
    }];
    changelog.append(&torn, 0).unwrap();
    drop(changelog);
    let (reopened, report) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert_eq!(report.unpublished_records_dropped, 1);
    assert_eq!(reopened.published(), Some(0));
    drop(reopened);

    // A writer that published a commit and died before its store applied it (the stand-in
    // publishes with the store closed): opening replays the commit; recover drops staged writes.
    let (mut writer, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    let published = [NewRecord {
        timestamp: 3,
        key: Some(b"b"),
        value: Some(b"2"),
    }];
    writer.append(&published, 0).unwrap();
    writer.publish(&mut || {}).unwrap();
    drop(writer);
    let (mut store, restored) = open(&task, &logs, 1 << 20);
    assert_eq!(restored, 1);
    store
        .store
        .put(b"staged", Some(&ts_value(4, b"gone")))
        .unwrap();
    assert!(store.recover(None, &mut |_, _| {}).unwrap());
    assert_eq!(
        contents(&store),
        vec![
            (b"a".to_vec(), ts_value(1, b"1")),
            (b"b".to_vec(), ts_value(3, b"2"))
        ]
    );
    assert_eq!(store.store.committed_offset().unwrap(), Some(1));
}

/// A remote log in a directory: each commit becomes `<first>.log`, created only if absent.
struct DirectoryPublisher {
    remote: PathBuf,
    fail: Arc<AtomicBool>,
}

impl Publisher for DirectoryPublisher {
    fn publish(&mut self, first: i64, _last: i64, segment: &Path) -> kstate_core::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::Storage("the remote is down".into()));
        }
        let target = self.remote.join(format!("{}.log", filename_prefix(first)));
        fs::hard_link(segment, &target)
            .map_err(|e| Error::InvalidState(format!("offset {first} is taken: {e}")))
    }
}

fn open_remote(task: &Path, cache: &Path, remote: &Path, fail: &Arc<AtomicBool>) -> LoggedStore {
    let (mut store, _) = open(task, cache, 1 << 20);
    let changelog = store.changelog_mut().unwrap();
    changelog.set_publisher(Box::new(DirectoryPublisher {
        remote: remote.to_path_buf(),
        fail: Arc::clone(fail),
    }));
    store
}

#[test]
fn a_publisher_is_the_publication_point_and_other_writers_add_what_it_published() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    fs::create_dir(&remote).unwrap();
    let fail = Arc::new(AtomicBool::new(false));
    let task = dir.path().join("a/app/0_0");
    let mut writer = open_remote(&task, &dir.path().join("a/cache"), &remote, &fail);
    writer.store.put(b"a", Some(&ts_value(5, b"one"))).unwrap();
    writer.store.put(b"b", Some(&ts_value(6, b"two"))).unwrap();
    let (offset, stages) = commit(&mut writer);
    assert_eq!(offset, Some(1));
    assert_eq!(
        stages,
        [
            CommitStage::Uploaded,
            CommitStage::Published,
            CommitStage::StoreCommitted,
            CommitStage::Checkpointed
        ]
    );
    let object = remote.join(format!("{}.log", filename_prefix(0)));
    let records = decode_records(&fs::read(&object).unwrap()).unwrap();
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.offset, r.timestamp, r.key.clone().unwrap()))
        .collect();
    assert_eq!(seen, [(0, 5, b"a".to_vec()), (1, 6, b"b".to_vec())]);

    // A failed publication leaves nothing: not in the cache, not in the store.
    writer.store.put(b"a", None).unwrap();
    fail.store(true, Ordering::SeqCst);
    let failed = writer.commit(None, 99, &mut |_| {}, &mut |_| {});
    assert!(matches!(failed, Err(Error::Storage(_))), "{failed:?}");
    assert_eq!(writer.changelog_mut().unwrap().published(), Some(1));
    assert_eq!(writer.store.committed_offset().unwrap(), Some(1));
    fail.store(false, Ordering::SeqCst);
    assert_eq!(commit(&mut writer).0, Some(2));
    let expected = contents(&writer);

    // Another machine takes in both objects and restores; then its commit at 2 is refused.
    let (mut other, _) = open(
        &dir.path().join("b/app/0_0"),
        &dir.path().join("b/cache"),
        1 << 20,
    );
    let changelog = other.changelog_mut().unwrap();
    let first = changelog.add_published(&object, 0, Some(1), 0).unwrap();
    assert_eq!((first.entries, first.last_offset), (2, 1));
    let second = remote.join(format!("{}.log", filename_prefix(2)));
    assert_eq!(
        changelog
            .add_published(&second, 2, None, 0)
            .unwrap()
            .last_offset,
        2
    );
    assert_eq!(other.restore(&mut |_, _| {}).unwrap(), 3);
    assert_eq!(contents(&other), expected);

    // A compacted object covering what the cache holds replaces it; the store replays past it.
    let compacted = dir.path().join("compacted.log");
    fs::copy(&second, &compacted).unwrap();
    let changelog = other.changelog_mut().unwrap();
    changelog.add_published(&compacted, 0, Some(2), 0).unwrap();
    assert_eq!(
        (changelog.log_start_offset(), changelog.published()),
        (0, Some(2))
    );
    assert_eq!(other.restore(&mut |_, _| {}).unwrap(), 0);
    // An object past the cache's end restarts it there (the store holds what comes before).
    let mut builder = MessageSetBuilder::new(Magic::V1, Compression::None);
    builder.append(10, 7, Some(b"c"), Some(b"x")).unwrap();
    let later = dir.path().join("later.log");
    fs::write(&later, builder.build().unwrap()).unwrap();
    let changelog = other.changelog_mut().unwrap();
    changelog.add_published(&later, 10, None, 0).unwrap();
    assert_eq!(
        (changelog.log_start_offset(), changelog.published()),
        (10, Some(10))
    );
}

#[test]
fn publish_then_commit_published_is_a_commit_in_two_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let (mut store, _) = open(&task, &logs, 1 << 20);
    store.store.put(b"a", Some(&ts_value(5, b"one"))).unwrap();
    let published = store.publish(99).unwrap();
    assert_eq!(published, Some(0));
    assert_eq!(
        store.store.committed_offset().unwrap(),
        None,
        "published only"
    );
    assert!(store.commit_published(Some(7), &mut |_| {}).is_err());
    store.commit_published(published, &mut |_| {}).unwrap();
    assert_eq!(store.store.committed_offset().unwrap(), Some(0));
    assert_eq!(contents(&store), [(b"a".to_vec(), ts_value(5, b"one"))]);
    store.close().unwrap();

    // Published but never applied: reopening restores it from the changelog.
    let (mut store, _) = open(&task, &logs, 1 << 20);
    store.store.put(b"b", Some(&ts_value(6, b"two"))).unwrap();
    assert_eq!(store.publish(99).unwrap(), Some(1));
    store.close().unwrap();
    let (store, restored) = open(&task, &logs, 1 << 20);
    assert_eq!(restored, 1);
    assert_eq!(store.store.committed_offset().unwrap(), Some(1));
}

/// The staged keys with their committed values, as a commit's undo takes them.
fn undo_of(store: &mut LoggedStore) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut undo = Vec::new();
    store
        .store
        .previous_values_of_staged(&mut |k, v| {
            undo.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
    undo
}

#[test]
fn previous_values_of_staged_are_the_committed_values_of_written_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let (mut store, _) = open(&task, &logs, 1 << 20);
    store.store.put(b"a", Some(&ts_value(1, b"a1"))).unwrap();
    store.store.put(b"b", Some(&ts_value(1, b"b1"))).unwrap();
    commit(&mut store);
    store.store.get(b"a").unwrap(); // one from the read cache, one from RocksDB
    store.store.put(b"a", Some(&ts_value(2, b"a2"))).unwrap();
    store.store.put(b"b", None).unwrap();
    store.store.put(b"c", Some(&ts_value(2, b"c2"))).unwrap();
    assert_eq!(
        undo_of(&mut store),
        [
            (b"a".to_vec(), Some(ts_value(1, b"a1"))),
            (b"b".to_vec(), Some(ts_value(1, b"b1"))),
            (b"c".to_vec(), None),
        ]
    );
}

#[test]
fn previous_values_of_many_staged_keys_around_the_largest_committed_key() {
    // Enough keys that the undo first looks up the largest committed key (new keys after it
    // are absent without a read): keys below, at and after it, a deleted largest key, and an
    // empty store.
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let (mut store, _) = open(&task, &logs, 1 << 20);
    let key = |i: u32| format!("k{i:03}").into_bytes();
    for i in 0..40 {
        store.store.put(&key(i), Some(&ts_value(1, b"v"))).unwrap();
    }
    let first = undo_of(&mut store);
    assert!(first.iter().all(|(_, v)| v.is_none()), "an empty store");
    commit(&mut store);
    for i in (0..40).step_by(2) {
        store.store.put(&key(i), None).unwrap(); // k038 the largest still held after this
    }
    store.store.put(&key(39), None).unwrap();
    commit(&mut store);

    for i in 0..60 {
        store.store.put(&key(i), Some(&ts_value(2, b"w"))).unwrap();
    }
    let expected: Vec<_> = (0..60)
        .map(|i| {
            let held = i < 39 && i % 2 == 1;
            (key(i), held.then(|| ts_value(1, b"v")))
        })
        .collect();
    assert_eq!(undo_of(&mut store), expected);
}

#[test]
fn retract_withdraws_published_records_past_an_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let partition_dir = logs.join(format!("{TOPIC}-0"));
    let (mut store, _) = open(&task, &logs, 1 << 20);
    for (i, key) in [b"a", b"b", b"c"].iter().enumerate() {
        store
            .store
            .put(*key, Some(&ts_value(i as i64, b"v")))
            .unwrap();
        commit(&mut store);
    }
    store.close().unwrap();
    let (mut changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert_eq!(changelog.retract_to(Some(2)).unwrap(), 0, "nothing past 2");
    assert_eq!(changelog.retract_to(Some(0)).unwrap(), 2);
    assert_eq!(changelog.published(), Some(0));
    changelog.close().unwrap();
    let (mut changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert_eq!(changelog.published(), Some(0));
    assert_eq!(changelog.retract_to(None).unwrap(), 1);
    assert_eq!(changelog.published(), None);
    changelog.close().unwrap();
    let (changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert_eq!(changelog.published(), None);
    changelog.close().unwrap();
    // A fresh task dir restores nothing from the retracted changelog.
    let (store, restored) = open(&dir.path().join("app/0_1"), &logs, 1 << 20);
    assert_eq!(restored, 0);
    assert!(contents(&store).is_empty());
}

#[test]
fn a_clean_reopen_leaves_the_published_marker_as_it_is_and_any_other_rewrites_it() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let partition_dir = dir.path().join(format!("{TOPIC}-0"));
    let marker = partition_dir.join(".kstate-published");
    // Written by a rename of a fresh file, so a rewrite shows as a new inode.
    let inode = || fs::metadata(&marker).unwrap().ino();
    let record = [NewRecord {
        timestamp: 1,
        key: Some(b"k"),
        value: Some(b"v"),
    }];
    let (mut changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    changelog.append(&record, 0).unwrap();
    assert_eq!(changelog.publish(&mut || {}).unwrap(), Some(0));
    changelog.close().unwrap();
    let written = inode();

    // Closed cleanly: the marker is the one the publication wrote.
    let (mut changelog, report) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert!(report.log.reopened_clean, "{report:?}");
    assert_eq!(inode(), written);
    assert_eq!(changelog.published(), Some(0));
    // A publication still writes it.
    changelog.append(&record, 0).unwrap();
    assert_eq!(changelog.publish(&mut || {}).unwrap(), Some(1));
    assert_ne!(inode(), written);
    let written = inode();

    // A writer that stopped without closing (a kill): the reopen scans and rewrites the marker.
    drop(changelog);
    let (changelog, report) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert!(!report.log.reopened_clean, "{report:?}");
    assert_ne!(inode(), written);
    assert_eq!(changelog.published(), Some(1));
    changelog.close().unwrap();
}

#[test]
fn history_deleted_before_an_offset_restores_stores_past_it_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (task, logs) = (dir.path().join("app/0_0"), dir.path().join("changelog"));
    let partition_dir = logs.join(format!("{TOPIC}-0"));
    let round = |store: &mut LoggedStore, value: &[u8]| {
        for key in [b"a", b"b", b"c"] {
            store.store.put(key, Some(&ts_value(1, value))).unwrap();
        }
        commit(store).0.unwrap()
    };
    let (mut store, _) = open(&task, &logs, 1 << 20);
    round(&mut store, b"1");
    let second = round(&mut store, b"2");
    store.close().unwrap();
    let behind = dir.path().join("app/0_1");
    copy_tree(&task, &behind);
    let (mut store, _) = open(&task, &logs, 1 << 20);
    let last = round(&mut store, b"3");
    store.close().unwrap();

    let (mut changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    assert!(
        matches!(
            changelog.delete_records_before(last + 2, 1),
            Err(Error::InvalidArgument(_))
        ),
        "only published records go"
    );
    let report = changelog.delete_records_before(second + 1, 1).unwrap();
    assert_eq!(report.log_start_offset, second + 1);
    changelog.close().unwrap();

    // A store at the offset before the start catches up; one with nothing cannot, and says so.
    let (store, restored) = open(&behind, &logs, 1 << 20);
    assert_eq!(restored, 3);
    assert_eq!(store.store.committed_offset().unwrap(), Some(last));
    drop(store);
    let fresh = dir.path().join("app/0_2");
    let (store, _) = KeyValueStore::open_rocksdb(
        "s",
        &fresh.join("rocksdb/s"),
        &fresh.join("rocksdb/.s.uncommitted"),
        ValueFormat::Timestamped,
        StoreOptions {
            transactional: true,
            max_uncommitted_bytes: 1 << 20,
            offset_key: format!("{TOPIC}-0"),
            cache_max_bytes: 1 << 20,
            rocks: None,
            durability: Default::default(),
        },
        &mut |_| {},
    )
    .unwrap();
    let (changelog, _) = Changelog::open(&partition_dir, LogConfig::default()).unwrap();
    let changelog = StoreChangelog {
        changelog,
        checkpoint: None,
        topic: TOPIC.into(),
        partition: 0,
        timestamped: true,
    };
    let refused = LoggedStore::logged(store, changelog, &mut |_, _| {});
    assert!(
        matches!(&refused, Err(Error::ChangelogTruncated(m)) if m.contains(&format!("before offset {}", second + 1))),
        "a store with nothing must not replay a changelog missing its start: {:?}",
        refused.err()
    );
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for item in fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if item.file_type().unwrap().is_dir() {
            copy_tree(&item.path(), &target);
        } else {
            fs::copy(item.path(), target).unwrap();
        }
    }
}

/// Every key's latest value (`None`: a tombstone) as a restore of `changelog` would apply it.
fn replayed(changelog: &Changelog) -> std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let mut latest = std::collections::BTreeMap::new();
    changelog
        .replay(0, i64::MAX, &mut |view, rows, _| {
            for row in rows {
                let key = view.keys.get(row).unwrap().to_vec();
                latest.insert(key, view.values.get(row).map(<[u8]>::to_vec));
            }
            Ok(())
        })
        .unwrap();
    latest
}

/// Commits of `keys` keys' values (a tenth of them deleted) until the log holds `bytes`.
fn publish_rounds(
    changelog: &mut Changelog,
    reference: &mut std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    round: &mut u64,
    keys: u64,
    bytes: u64,
) -> Vec<kstate_core::logged::changelog::CleaningReport> {
    let value = [7u8; 200];
    let mut reports = Vec::new();
    let mut written = 0;
    while written < bytes {
        *round += 1;
        let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..1_000)
            .map(|i| {
                let key = format!("key-{:06}", (*round * 7_919 + i) % keys).into_bytes();
                let deleted = (*round + i).is_multiple_of(10);
                let value = (!deleted).then(|| [&round.to_be_bytes()[..], &value].concat());
                (key, value)
            })
            .collect();
        let new: Vec<NewRecord<'_>> = records
            .iter()
            .map(|(key, value)| NewRecord {
                timestamp: -1,
                key: Some(key),
                value: value.as_deref(),
            })
            .collect();
        changelog.append(&new, 0).unwrap();
        changelog.publish(&mut || {}).unwrap();
        for (key, value) in records {
            reference.insert(key, value);
        }
        written += 1_000 * 230;
        reports.push(changelog.clean(0, None).unwrap());
    }
    reports
}

/// A compacted topic's config with segments of `segment_bytes`.
fn compacting(segment_bytes: i32) -> LogConfig {
    let mut config = LogConfig::default();
    config.set("cleanup.policy", "compact").unwrap();
    config
        .set("segment.bytes", &segment_bytes.to_string())
        .unwrap();
    config
}

#[test]
fn a_large_compaction_runs_beside_the_commits_and_a_later_clean_swaps_it_in() {
    let dir = tempfile::tempdir().unwrap();
    let config = compacting(2 << 20);
    let (mut changelog, _) =
        Changelog::open(&dir.path().join(format!("{TOPIC}-0")), config).unwrap();
    let (mut reference, mut round) = (Default::default(), 0);
    // 40 MiB over 20k keys: compactions of more than COMPACT_IN_PLACE_BYTES start off the commits.
    let reports = publish_rounds(&mut changelog, &mut reference, &mut round, 20_000, 40 << 20);
    assert!(
        reports.iter().any(|r| r.compaction.is_some()),
        "a compaction started while commits went on was swapped in by a later clean"
    );
    // What is in flight finishes; the log then holds each key's latest record.
    let mut swapped = 0;
    while swapped < 2 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let more = publish_rounds(&mut changelog, &mut reference, &mut round, 20_000, 1);
        swapped += more.iter().filter(|r| r.compaction.is_some()).count();
    }
    assert_eq!(replayed(&changelog), reference);
    let size: u64 = fs::read_dir(changelog.dir())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(size < 20 << 20, "compacted: {size} bytes on disk");
    changelog.close().unwrap();
    let (changelog, report) =
        Changelog::open(&dir.path().join(format!("{TOPIC}-0")), LogConfig::default()).unwrap();
    assert!(report.log.reopened_clean, "{report:?}");
    assert_eq!(replayed(&changelog), reference);
}

/// Commits until one starts a compaction off the commit path (50k keys: the compacted log
/// alone passes `COMPACT_IN_PLACE_BYTES`).
fn until_compacting(
    changelog: &mut Changelog,
    reference: &mut std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    round: &mut u64,
) {
    for _ in 0..1_000 {
        publish_rounds(changelog, reference, round, 50_000, 1);
        if changelog.is_compacting() {
            return;
        }
    }
    panic!("no compaction started off the commit path");
}

#[test]
fn a_compaction_in_flight_is_abandoned_when_the_log_is_cut_and_finished_when_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let config = compacting(1 << 20);
    let partition_dir = dir.path().join(format!("{TOPIC}-0"));
    let (mut changelog, _) = Changelog::open(&partition_dir, config.clone()).unwrap();
    let (mut reference, mut round) = (Default::default(), 0);
    until_compacting(&mut changelog, &mut reference, &mut round);
    // A retraction (a crashed batch's records withdrawn) cuts records the compaction read.
    let published = changelog.published().unwrap();
    changelog.retract_to(Some(published - 1_500)).unwrap();
    assert!(!changelog.is_compacting());
    let cut = replayed(&changelog);
    assert_ne!(
        cut, reference,
        "the retraction withdrew the newest values of some keys"
    );
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        changelog.clean(0, None).unwrap();
    }
    assert!(
        replayed(&changelog) == cut,
        "nothing of the withdrawn records' compaction swapped in"
    );
    // Closed while one runs: the close waits for it and swaps it in (a store opened for one
    // commit at a time compacts too), leaving no `.cleaned` file behind.
    reference = cut;
    until_compacting(&mut changelog, &mut reference, &mut round);
    let bytes = |dir: &Path| -> u64 {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let before_close = bytes(&partition_dir);
    let report = changelog
        .close()
        .unwrap()
        .expect("the close reports the compaction");
    assert!(
        bytes(&partition_dir) < before_close,
        "the compaction was swapped in"
    );
    assert!(report.bytes_after < report.bytes_before, "{report:?}");
    let leftovers: Vec<_> = fs::read_dir(&partition_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains(".cleaned") || name.contains(".swap"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let (changelog, report) = Changelog::open(&partition_dir, config).unwrap();
    assert!(report.log.reopened_clean, "{report:?}");
    assert!(replayed(&changelog) == reference);
}
