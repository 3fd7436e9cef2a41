//! The transactional store end to end on real RocksDB, without Python.

use std::path::Path;

use kstate_core::store::merge::{ScanLimit, CHUNK_BYTES};
use kstate_core::store::{Durability, OpenReport};
use kstate_core::{Direction, Error, KeyRange, KeyValueStore, StoreOptions, ValueFormat};

mod common;
use common::copy_dir;

const OFFSET_KEY: &str = "app-s-changelog-0";

fn options(max_uncommitted_bytes: usize) -> StoreOptions {
    StoreOptions {
        transactional: true,
        max_uncommitted_bytes,
        offset_key: OFFSET_KEY.into(),
        cache_max_bytes: 1 << 20,
        rocks: None,
        durability: Default::default(),
    }
}

fn open(dir: &Path, format: ValueFormat, max_uncommitted_bytes: usize) -> KeyValueStore {
    let (store, _) = KeyValueStore::open_rocksdb(
        "s",
        &dir.join("rocksdb/s"),
        &dir.join("rocksdb/.s.uncommitted"),
        format,
        options(max_uncommitted_bytes),
        &mut |_| {},
    )
    .expect("open");
    store
}

fn all(store: &KeyValueStore, direction: Direction) -> Vec<(Vec<u8>, Vec<u8>)> {
    store.scan(&KeyRange::all(), direction, usize::MAX).unwrap()
}

fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
    (k.as_bytes().to_vec(), v.as_bytes().to_vec())
}

#[test]
fn staged_writes_are_read_then_committed_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 1 << 20);
    assert_eq!(store.uncommitted(), (0, false));
    store.put(b"a", Some(b"1")).unwrap();
    store.put(b"b", Some(b"2")).unwrap();
    let (staged_bytes, _) = store.uncommitted();
    assert!(
        staged_bytes > 4,
        "counts the overlay's 4 bytes and the staged batch"
    );
    assert_eq!(store.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(store.read_committed_view().get(b"a").unwrap(), None);
    store.commit(Some(7), &mut |_| {}).unwrap();
    assert_eq!(store.uncommitted(), (0, false));
    assert_eq!(
        store.read_committed_view().get(b"a").unwrap(),
        Some(b"1".to_vec())
    );

    store.put(b"a", None).unwrap();
    store.put(b"c", Some(b"3")).unwrap();
    assert_eq!(
        all(&store, Direction::Forward),
        vec![kv("b", "2"), kv("c", "3")]
    );
    assert!(store.recover(Some(7)).unwrap());
    assert!(!store.recover(Some(8)).unwrap());
    assert_eq!(
        all(&store, Direction::Reverse),
        vec![kv("b", "2"), kv("a", "1")]
    );

    store.put(b"z", Some(b"uncommitted")).unwrap();
    store.close().unwrap();
    assert!(matches!(store.get(b"a"), Err(Error::Closed(_))));
    let store = open(dir.path(), ValueFormat::Plain, 1 << 20);
    assert_eq!(store.committed_offset().unwrap(), Some(7));
    assert_eq!(
        all(&store, Direction::Forward),
        vec![kv("a", "1"), kv("b", "2")]
    );
}

#[test]
fn writes_past_the_memory_bound_spill_and_commit_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Timestamped, 1000);
    for i in 0..500u32 {
        store
            .put(format!("k{i:04}").as_bytes(), Some(&[7u8; 40]))
            .unwrap();
    }
    assert!(
        store.uncommitted().1,
        "500 x 45 bytes must spill past 1000 bytes"
    );
    store.put(b"k0001", None).unwrap();
    assert_eq!(store.get(b"k0001").unwrap(), None);
    assert_eq!(
        store
            .scan(&KeyRange::all(), Direction::Forward, 10_000)
            .unwrap()
            .len(),
        499
    );
    assert_eq!(store.read_committed_view().get(b"k0002").unwrap(), None);

    let mut reports = 0;
    store.commit(Some(1), &mut |_| reports += 1).unwrap();
    assert!(reports >= 1);
    assert!(!dir.path().join("rocksdb/.s.uncommitted").exists());
    store.close().unwrap();
    let store = open(dir.path(), ValueFormat::Timestamped, 1000);
    let entries = all(&store, Direction::Forward);
    assert_eq!(entries.len(), 499);
    assert_eq!(entries[0].0, b"k0000");
    assert_eq!(entries[1].0, b"k0002");
    assert_eq!(store.committed_offset().unwrap(), Some(1));
}

#[test]
fn a_spilled_commit_deletes_and_overwrites_committed_keys() {
    // A spilled commit ingests its writes as a table file: its deletes must hide committed values
    // (memtable and flushed ones alike), before and after reopening.
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 1000);
    for i in 0..300u32 {
        store
            .put(format!("k{i:04}").as_bytes(), Some(b"old"))
            .unwrap();
    }
    store.commit(Some(1), &mut |_| {}).unwrap();
    store.compact().unwrap(); // the committed values in a table file, not the memtable
    store.put(b"k0299", Some(b"in-memtable")).unwrap();
    store.commit(Some(2), &mut |_| {}).unwrap();
    for i in (0..300u32).step_by(2) {
        store.put(format!("k{i:04}").as_bytes(), None).unwrap();
    }
    store.put(b"k0001", Some(&[9u8; 40])).unwrap();
    store.put(b"k0299", None).unwrap();
    for i in 0..100u32 {
        store
            .put(format!("n{i:04}").as_bytes(), Some(&[5u8; 40]))
            .unwrap();
    }
    assert!(store.uncommitted().1, "must spill past 1000 bytes");
    store.commit(Some(3), &mut |_| {}).unwrap();
    for reopened in [false, true] {
        if reopened {
            store.close().unwrap();
            store = open(dir.path(), ValueFormat::Plain, 1000);
        }
        assert_eq!(store.get(b"k0000").unwrap(), None);
        assert_eq!(store.get(b"k0299").unwrap(), None);
        assert_eq!(store.get(b"k0001").unwrap(), Some(vec![9u8; 40]));
        assert_eq!(store.get(b"k0003").unwrap(), Some(b"old".to_vec()));
        let entries = all(&store, Direction::Forward);
        assert_eq!(entries.len(), 149 + 100, "reopened: {reopened}");
        assert_eq!(store.committed_offset().unwrap(), Some(3));
    }
}

#[test]
fn reads_after_commits_never_see_a_stale_cached_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 1000);
    store.put(b"a", Some(b"1")).unwrap();
    store.put(b"b", Some(b"2")).unwrap();
    store.commit(Some(1), &mut |_| {}).unwrap();
    // Reads fill the cache from RocksDB; the commits below must keep it current.
    assert_eq!(store.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(store.get_many(&[b"b"]).unwrap(), vec![Some(b"2".to_vec())]);
    store.put(b"a", None).unwrap();
    store.commit(Some(2), &mut |_| {}).unwrap();
    assert_eq!(
        store.get(b"a").unwrap(),
        None,
        "a committed delete is cached as absent"
    );
    assert_eq!(
        store.get_many(&[b"a", b"b"]).unwrap(),
        vec![None, Some(b"2".to_vec())]
    );

    // A commit that spilled to disk rewrites "b" behind the cache's back.
    for i in 0..100u32 {
        store
            .put(format!("k{i:03}").as_bytes(), Some(&[0u8; 40]))
            .unwrap();
    }
    store.put(b"b", Some(b"spilled")).unwrap();
    assert!(store.uncommitted().1);
    store.commit(Some(3), &mut |_| {}).unwrap();
    assert_eq!(store.get(b"b").unwrap(), Some(b"spilled".to_vec()));
    assert_eq!(
        store.get_many(&[b"b"]).unwrap(),
        vec![Some(b"spilled".to_vec())]
    );
    store.close().unwrap();

    // Without transactions every write goes through the cache to RocksDB.
    let direct = StoreOptions {
        transactional: false,
        ..options(1000)
    };
    let (mut store, _) = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("rocksdb/s"),
        &dir.path().join("rocksdb/.s.uncommitted"),
        ValueFormat::Plain,
        direct,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(store.get(b"b").unwrap(), Some(b"spilled".to_vec()));
    store.put(b"b", None).unwrap();
    assert_eq!(store.get(b"b").unwrap(), None);
    assert_eq!(store.read_committed_view().get(b"b").unwrap(), None);
}

#[test]
fn scans_continue_after_the_last_key_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 1 << 20);
    for i in 0..100u8 {
        store.put(&[i], Some(&[i])).unwrap();
    }
    store.commit(None, &mut |_| {}).unwrap();
    for i in (0..100u8).step_by(3) {
        store.put(&[i], None).unwrap();
    }
    for direction in [Direction::Forward, Direction::Reverse] {
        let mut range = KeyRange::inclusive(Some(&[10]), Some(&[90]));
        let mut seen = Vec::new();
        loop {
            let chunk = store.scan(&range, direction, 7).unwrap();
            seen.extend(chunk.iter().map(|(k, _)| k[0]));
            match chunk.last() {
                Some((last, _)) if chunk.len() == 7 => range = range.after(last, direction),
                _ => break,
            }
        }
        let mut expected: Vec<u8> = (10..=90).filter(|i| i % 3 != 0).collect();
        if direction == Direction::Reverse {
            expected.reverse();
        }
        assert_eq!(seen, expected);
    }
}

#[test]
fn chunks_of_large_values_stop_at_their_bytes_and_resume_after_the_last_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 64 << 20);
    // Values from empty to 3x a chunk's bytes, committed, then staged over (a merged scan).
    let size = |i: usize| (i * 7919) % (3 * CHUNK_BYTES);
    for i in 0..60usize {
        store
            .put(&(i as u32).to_be_bytes(), Some(&vec![i as u8; size(i)]))
            .unwrap();
    }
    store.commit(Some(1), &mut |_| {}).unwrap();
    for i in (0..60usize).step_by(4) {
        store.put(&(i as u32).to_be_bytes(), None).unwrap();
    }
    store.put(&100u32.to_be_bytes(), Some(&[1; 10])).unwrap();
    for direction in [Direction::Forward, Direction::Reverse] {
        let expected = all(&store, direction);
        let mut range = KeyRange::all();
        let mut seen = Vec::new();
        loop {
            let mut chunk = Vec::new();
            let scanned = store
                .scan_with(&range, direction, ScanLimit::chunk(2048), &mut |k, v| {
                    chunk.push((k.to_vec(), v.to_vec()));
                    Ok(())
                })
                .unwrap();
            common::assert_chunk(&chunk, scanned);
            seen.extend(chunk);
            if !scanned.at_limit {
                break;
            }
            range = range.after(&seen.last().unwrap().0, direction);
        }
        assert_eq!(seen.len(), 46);
        assert!(
            seen == expected,
            "{direction:?}: chunked rows differ from the whole scan"
        );
    }
}

#[test]
fn legacy_values_in_default_are_read_with_timestamp_minus_one_and_migrated_by_get() {
    let dir = tempfile::tempdir().unwrap();
    let mut plain = open(dir.path(), ValueFormat::Plain, 1 << 20);
    plain.put(b"k1", Some(b"1")).unwrap();
    plain.put(b"k2", Some(b"4444")).unwrap();
    plain.commit(None, &mut |_| {}).unwrap();
    plain.close().unwrap();

    let (mut store, report) = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("rocksdb/s"),
        &dir.path().join("rocksdb/.s.uncommitted"),
        ValueFormat::Timestamped,
        options(1 << 20),
        &mut |_| {},
    )
    .unwrap();
    assert!(report.upgrade_mode);
    let mut legacy_one = vec![0xff; 8];
    legacy_one.push(b'1');
    assert_eq!(store.get(b"k1").unwrap(), Some(legacy_one));
    assert_eq!(all(&store, Direction::Forward).len(), 2);
    store.delete(b"k2").unwrap();
    store.commit(None, &mut |_| {}).unwrap();
    store.close().unwrap();

    let (store, report) = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("rocksdb/s"),
        &dir.path().join("rocksdb/.s.uncommitted"),
        ValueFormat::Timestamped,
        options(1 << 20),
        &mut |_| {},
    )
    .unwrap();
    assert!(!report.upgrade_mode, "every legacy key migrated or deleted");
    assert_eq!(all(&store, Direction::Forward).len(), 1);
}

#[test]
fn a_plain_store_refuses_a_timestamped_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Timestamped, 1 << 20);
    store.put(b"k", Some(&[0; 9])).unwrap();
    store.commit(None, &mut |_| {}).unwrap();
    store.close().unwrap();
    let reopened = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("rocksdb/s"),
        &dir.path().join("rocksdb/.s.uncommitted"),
        ValueFormat::Plain,
        options(1 << 20),
        &mut |_| {},
    );
    assert!(matches!(reopened, Err(Error::InvalidState(_))));
}

#[test]
fn staged_writes_stream_out_in_key_order_spilled_or_not_and_restore_bypasses_them() {
    let dir = tempfile::tempdir().unwrap();
    for limit in [1 << 20, 200] {
        let mut store = open(dir.path(), ValueFormat::Plain, limit);
        for i in (0..100u32).rev() {
            store
                .put(format!("k{i:03}").as_bytes(), Some(b"v"))
                .unwrap();
        }
        store.put(b"k050", None).unwrap();
        assert_eq!(
            store.uncommitted().1,
            limit == 200,
            "the small limit spills"
        );
        let mut seen = Vec::new();
        let mut chunks = 0;
        store
            .for_each_staged(64, &mut |chunk| {
                chunks += 1;
                seen.extend(chunk.iter().map(|(k, v)| (k.to_vec(), v.is_some())));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen.len(), 100);
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "key order");
        assert!(!seen[50].1, "k050 is a staged delete");
        assert!(chunks > 1);
        assert!(matches!(
            store.restore(&mut std::iter::empty(), 0),
            Err(Error::InvalidState(_))
        ));
        store.recover(None).unwrap();
        store
            .restore(&mut [(&b"r"[..], Some(&b"1"[..]))].into_iter(), 41)
            .unwrap();
        assert_eq!(store.committed_offset().unwrap(), Some(41));
        assert_eq!(
            store.read_committed_view().get(b"r").unwrap(),
            Some(b"1".to_vec())
        );
        store.close().unwrap();
    }
}

fn open_plain(dir: &Path, options: StoreOptions) -> (KeyValueStore, OpenReport) {
    KeyValueStore::open_rocksdb(
        "s",
        &dir.join("rocksdb/s"),
        &dir.join("rocksdb/.s.uncommitted"),
        ValueFormat::Plain,
        options,
        &mut |_| {},
    )
    .expect("open")
}

fn open_durable(dir: &Path, durability: Durability) -> (KeyValueStore, OpenReport) {
    open_plain(
        dir,
        StoreOptions {
            durability,
            ..options(1 << 20)
        },
    )
}

#[test]
fn changelog_durability_loses_unflushed_commits_whole_and_reports_it() {
    for durability in [Durability::Wal, Durability::Changelog] {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, report) = open_durable(dir.path(), durability);
        assert!(!report.unflushed_commits_lost);
        store.put(b"a", Some(b"1")).unwrap();
        store.commit(Some(1), &mut |_| {}).unwrap();
        store.compact().unwrap(); // flushes
        store.put(b"a", Some(b"2")).unwrap();
        store.put(b"b", Some(b"2")).unwrap();
        store.commit(Some(2), &mut |_| {}).unwrap();
        let durable = match durability {
            Durability::Wal => 2,
            Durability::Changelog => 1,
        };
        assert_eq!(store.durable_offset().unwrap(), Some(durable));
        let killed = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), killed.path());
        store.close().unwrap();

        let (mut reopened, report) = open_durable(killed.path(), durability);
        let rows = match durability {
            Durability::Wal => vec![kv("a", "2"), kv("b", "2")],
            Durability::Changelog => vec![kv("a", "1")],
        };
        assert_eq!(reopened.committed_offset().unwrap(), Some(durable));
        assert_eq!(all(&reopened, Direction::Forward), rows);
        assert_eq!(
            report.unflushed_commits_lost,
            durability == Durability::Changelog
        );
        reopened.close().unwrap();

        // A clean close flushed everything and marked the store closed.
        let (mut store, report) = open_durable(dir.path(), durability);
        assert_eq!(store.committed_offset().unwrap(), Some(2));
        assert!(!report.unflushed_commits_lost);
        assert!(!report.unclean_shutdown);
        store.close().unwrap();
    }
}

#[test]
fn changelog_durability_is_for_transactional_stores_and_has_two_names() {
    let dir = tempfile::tempdir().unwrap();
    let opened = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("rocksdb/s"),
        &dir.path().join("rocksdb/.s.uncommitted"),
        ValueFormat::Plain,
        StoreOptions {
            transactional: false,
            durability: Durability::Changelog,
            ..options(1 << 20)
        },
        &mut |_| {},
    );
    assert!(matches!(opened, Err(Error::InvalidArgument(_))));
    assert_eq!(Durability::parse("wal").unwrap(), Durability::Wal);
    assert_eq!(
        Durability::parse("changelog").unwrap(),
        Durability::Changelog
    );
    assert!(matches!(
        Durability::parse("WAL"),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn changelog_durability_flushes_the_offset_with_the_data_it_belongs_to() {
    use kstate_core::{MemoryBudget, RocksConfig};
    // 64 KiB write buffers: each commit below fills the data family's memtable, whose flush
    // must take the `offsets` family (a few bytes, never full) with it.
    let config = RocksConfig::new(
        MemoryBudget::new(64 << 20).unwrap(),
        Some("write_buffer_size=65536"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("rocksdb/s"),
        &dir.path().join("rocksdb/.s.uncommitted"),
        ValueFormat::Plain,
        StoreOptions {
            durability: Durability::Changelog,
            rocks: Some(config),
            ..options(1 << 30)
        },
        &mut |_| {},
    )
    .unwrap();
    let value = [7u8; 100];
    for offset in 1..=3 {
        for i in 0..2000u32 {
            store
                .put(format!("k{i:05}").as_bytes(), Some(&value))
                .unwrap();
        }
        store.commit(Some(offset), &mut |_| {}).unwrap();
    }
    // The memtable switch of commits 2 and 3 flushes what came before in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.durable_offset().unwrap().is_none_or(|o| o < 2) {
        assert!(
            std::time::Instant::now() < deadline,
            "the data family flushed without the offset"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(store.committed_offset().unwrap(), Some(3));
    store.close().unwrap();
}

/// `(number, bytes)` of each WAL file (`<number>.log`) in a RocksDB directory.
fn wal_files(dir: &Path) -> Vec<(u64, u64)> {
    let mut files: Vec<(u64, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().unwrap();
            let number = name.strip_suffix(".log")?.parse().ok()?;
            Some((number, entry.metadata().unwrap().len()))
        })
        .collect();
    files.sort_unstable();
    files
}

#[test]
fn recycled_wal_files_recover_a_killed_store_and_go_at_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    // 64 KiB write buffers and 256 KiB of WAL: every commit below switches memtables and every
    // few flush the offsets family too, so WAL files roll over, fall obsolete and are kept to
    // be written over.
    let config = kstate_core::RocksConfig::new(
        kstate_core::MemoryBudget::new(64 << 20).unwrap(),
        Some("write_buffer_size=65536;max_total_wal_size=262144"),
    )
    .unwrap();
    let open = |dir: &Path| {
        let options = StoreOptions {
            rocks: Some(config.clone()),
            ..options(1 << 20)
        };
        open_plain(dir, options).0
    };
    let value = vec![7u8; 1000];
    let mut store = open(dir.path());
    let mut expected = Vec::new();
    for commit in 0..40 {
        for i in 0..200 {
            let key = format!("key-{commit:03}-{i:03}").into_bytes();
            store.put(&key, Some(&value)).unwrap();
            expected.push((key, value.clone()));
        }
        store.commit(Some(commit), &mut |_| {}).unwrap();
    }
    // Compacting flushes every family, after which the WAL files before it are kept to be
    // written over; the next flush's WAL file is one of them. The commits after it are small:
    // they stay in the memtable and in that file, in front of its old records.
    let small_commit = |store: &mut KeyValueStore, commit: i64, expected: &mut Vec<_>| {
        for i in 0..10 {
            let key = format!("key-{commit:03}-{i:03}").into_bytes();
            store.put(&key, Some(&value)).unwrap();
            expected.push((key, value.clone()));
        }
        store.commit(Some(commit), &mut |_| {}).unwrap();
    };
    store.compact().unwrap();
    small_commit(&mut store, 40, &mut expected);
    store.compact().unwrap();
    for commit in 41..45 {
        small_commit(&mut store, commit, &mut expected);
    }
    let db = dir.path().join("rocksdb/s");
    let open_wals = wal_files(&db);
    let &(_, live_bytes) = open_wals.last().unwrap();
    assert!(
        live_bytes > 200_000,
        "the live WAL file is a recycled one, longer than the 40 KB written since: {open_wals:?}"
    );

    // Killed now: recovery reads the recycled file's new records and stops at its old ones.
    let killed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), killed.path());
    let mut recovered = open(killed.path());
    assert_eq!(recovered.committed_offset().unwrap(), Some(44));
    assert_eq!(all(&recovered, Direction::Forward), expected);
    recovered.close().unwrap();

    // Closed cleanly: the close's flush wrote a new, empty WAL file and the recycled ones went.
    store.close().unwrap();
    let closed_wals = wal_files(&db);
    assert!(
        closed_wals.len() <= 1,
        "{closed_wals:?} (open: {open_wals:?})"
    );
    assert!(
        closed_wals.iter().all(|&(_, bytes)| bytes < 4096),
        "{closed_wals:?}"
    );
    let mut reopened = open(dir.path());
    assert_eq!(reopened.committed_offset().unwrap(), Some(44));
    assert_eq!(all(&reopened, Direction::Forward), expected);
    reopened.close().unwrap();
}

#[test]
fn a_view_reading_on_another_thread_never_caches_what_a_commit_replaced() {
    // Round r commits key r; the reader reads keys r + 1 and r + 2 before they exist, so it often
    // reads "absent" from RocksDB just before a commit writes them and offers that to the read
    // cache just after the commit: kept, the cache would hide the committed key.
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 1 << 20);
    let key = |i: u64| format!("k{i:08}").into_bytes();
    let committed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let (view, committed) = (store.read_committed_view(), committed.clone());
        std::thread::spawn(move || loop {
            let round = committed.load(std::sync::atomic::Ordering::Acquire);
            if round == u64::MAX {
                return;
            }
            view.get(&key(round + 1)).unwrap();
            view.get(&key(round + 2)).unwrap();
        })
    };
    let view = store.read_committed_view();
    let mut stale = Vec::new();
    for round in 1..=20_000u64 {
        store.put(&key(round), Some(b"v")).unwrap();
        store.commit(Some(round as i64), &mut |_| {}).unwrap();
        committed.store(round, std::sync::atomic::Ordering::Release);
        if view.get(&key(round)).unwrap().is_none() {
            stale.push(round);
        }
    }
    committed.store(u64::MAX, std::sync::atomic::Ordering::Release);
    reader.join().unwrap();
    assert!(stale.is_empty(), "committed keys read as absent: {stale:?}");
}

#[test]
fn multi_gets_answer_keys_in_any_order_from_table_files_and_memtable() {
    // RocksDB is told when the keys come sorted (it then skips its own sort): keys in order,
    // shuffled, repeated and missing must all be answered, from table files and the memtable.
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), ValueFormat::Plain, 1 << 20);
    let key = |i: u32| format!("k{i:05}").into_bytes();
    for i in (0..2_000).step_by(2) {
        store.put(&key(i), Some(&key(i))).unwrap();
    }
    store.commit(Some(1), &mut |_| {}).unwrap();
    store.compact().unwrap();
    for i in (1..2_000).step_by(4) {
        store.put(&key(i), Some(&key(i))).unwrap();
    }
    store.commit(Some(2), &mut |_| {}).unwrap();
    let expected = |i: u32| (i < 2_000 && (i.is_multiple_of(2) || i % 4 == 1)).then(|| key(i));

    let in_order: Vec<u32> = (0..2_100).collect();
    let mut shuffled: Vec<u32> = (0..2_100).map(|i| (i * 7_919) % 2_100).collect();
    shuffled.extend([5, 5, 4, 4]);
    for asked in [in_order, shuffled] {
        let keys: Vec<Vec<u8>> = asked.iter().map(|&i| key(i)).collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let found = store.get_many(&keys).unwrap();
        let wrong: Vec<u32> = asked
            .iter()
            .zip(&found)
            .filter(|(&i, found)| **found != expected(i))
            .map(|(&i, _)| i)
            .collect();
        assert!(wrong.is_empty(), "wrong answers for keys {wrong:?}");
    }

    // The reads above filled the read cache (1 MiB); a commit brings the keys it holds up to date.
    store.put(&key(0), Some(b"new")).unwrap();
    store.put(&key(1), None).unwrap();
    store.put(&key(3), Some(b"added")).unwrap();
    store.commit(Some(3), &mut |_| {}).unwrap();
    let asked: Vec<&[u8]> = vec![b"k00000", b"k00001", b"k00003", b"k00002"];
    assert_eq!(
        store.get_many(&asked).unwrap(),
        vec![
            Some(b"new".to_vec()),
            None,
            Some(b"added".to_vec()),
            Some(key(2))
        ]
    );
}
