//! A store with its changelog on real RocksDB and a real log directory, without Python.

use std::path::Path;

use kstate_core::changelog::Changelog;
use kstate_core::checkpoint::OffsetCheckpoint;
use kstate_core::log::{LogConfig, NewRecord, Partition};
use kstate_core::logged_store::{CommitStage, LoggedStore, StoreChangelog};
use kstate_core::{Direction, KeyRange, KeyValueStore, StoreOptions, ValueFormat};

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
    writer.publish().unwrap();
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
    let mut undo = Vec::new();
    store
        .store
        .previous_values_of_staged(&mut |k, v| {
            undo.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
    assert_eq!(
        undo,
        [
            (b"a".to_vec(), Some(ts_value(1, b"a1"))),
            (b"b".to_vec(), Some(ts_value(1, b"b1"))),
            (b"c".to_vec(), None),
        ]
    );
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
