//! Snapshots of a committed key-value store end to end on real RocksDB, without Python: a
//! capture while a writer commits holds exactly the commit of the offset it names, a later
//! snapshot shares the unchanged table files, and the files placed in an empty directory open
//! as the store at that offset.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kstate_core::snapshot::files::{verify, FileHashes};
use kstate_core::snapshot::manifest::{SnapshotManifest, StoreKind};
use kstate_core::store::Durability;
use kstate_core::{Direction, KeyRange, KeyValueStore, StoreOptions, ValueFormat};

const OFFSET_KEY: &str = "app-s-changelog-0";
const KEYS: u32 = 2_000;

fn options(max_uncommitted_bytes: usize, durability: Durability) -> StoreOptions {
    StoreOptions {
        transactional: true,
        max_uncommitted_bytes,
        offset_key: OFFSET_KEY.into(),
        cache_max_bytes: 1 << 20,
        rocks: None,
        durability,
    }
}

fn open(dir: &Path, max_uncommitted_bytes: usize, durability: Durability) -> KeyValueStore {
    KeyValueStore::open_rocksdb(
        "s",
        &dir.join("store"),
        &dir.join(".s.uncommitted"),
        ValueFormat::Plain,
        options(max_uncommitted_bytes, durability),
        &mut |_| {},
    )
    .expect("open")
    .0
}

/// Commit `n` writes every key's value as `n` at offset `n`.
fn commit_round(store: &mut KeyValueStore, n: i64) {
    let value = n.to_be_bytes();
    for k in 0..KEYS {
        store
            .put(format!("key-{k:06}").as_bytes(), Some(&value))
            .unwrap();
    }
    store.commit(Some(n), &mut |_| {}).unwrap();
}

/// Every value the store holds, as the set of distinct rounds.
fn rounds(store: &KeyValueStore) -> BTreeSet<i64> {
    let rows = store
        .scan(&KeyRange::all(), Direction::Forward, usize::MAX)
        .unwrap();
    assert_eq!(rows.len(), KEYS as usize);
    rows.iter()
        .map(|(_, v)| i64::from_be_bytes(v.as_slice().try_into().unwrap()))
        .collect()
}

/// Copies a snapshot's files, as its manifest lists them, into `to`.
fn place(from: &Path, manifest: &SnapshotManifest, to: &Path) {
    for file in &manifest.files {
        let target = to.join(&file.path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&file.path), target).unwrap();
    }
}

fn capture(store: &KeyValueStore, at: &Path, hashes: &mut FileHashes) -> SnapshotManifest {
    let offset = store
        .committed_files()
        .unwrap()
        .capture(at)
        .unwrap()
        .unwrap();
    let (files, _) = hashes.describe(at).unwrap();
    let manifest = SnapshotManifest {
        offset,
        batch_id: None,
        kind: StoreKind::KeyValue,
        created_ms: 0,
        files,
    };
    SnapshotManifest::decode(&manifest.encode().unwrap()).unwrap()
}

#[test]
fn a_snapshot_opens_as_the_store_at_its_offset_and_the_next_copies_only_new_files() {
    for durability in [Durability::Wal, Durability::Changelog] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), 64 << 20, durability);
        let mut hashes = FileHashes::default();
        for n in 0..3 {
            commit_round(&mut store, n);
        }
        let first = capture(&store, &dir.path().join("snap-1"), &mut hashes);
        assert_eq!(first.offset, 2);
        assert!(first.files.iter().any(|f| f.path.ends_with(".sst")));
        assert!(first.files.iter().any(|f| f.path == "CURRENT"));
        assert!(
            !first.files.iter().any(|f| f.path.ends_with(".log")),
            "no WAL: the capture flushed"
        );
        assert!(verify(&dir.path().join("snap-1"), &first.files)
            .unwrap()
            .is_empty());

        commit_round(&mut store, 3);
        let (_, again) = hashes.describe(&dir.path().join("snap-1")).unwrap();
        assert_eq!(
            again.files_hashed as usize,
            first
                .files
                .iter()
                .filter(|f| !f.path.ends_with(".sst"))
                .count(),
            "table files are hashed once"
        );
        let second = capture(&store, &dir.path().join("snap-2"), &mut hashes);
        assert_eq!(second.offset, 3);
        let new = second.files_not_in(&first);
        let kept_tables = first
            .files
            .iter()
            .filter(|f| f.path.ends_with(".sst") && second.files.contains(f))
            .count();
        assert!(
            kept_tables > 0,
            "{durability:?}: the first tables are shared"
        );
        assert!(new.len() < second.files.len());
        assert!(new.iter().all(|f| !first
            .files
            .iter()
            .any(|old| old.object_name() == f.object_name())));

        for (name, snapshot, expected) in [("snap-1", &first, 2), ("snap-2", &second, 3)] {
            let restored = tempfile::tempdir().unwrap();
            place(
                &dir.path().join(name),
                snapshot,
                &restored.path().join("store"),
            );
            let copy = open(restored.path(), 64 << 20, durability);
            assert_eq!(copy.committed_offset().unwrap(), Some(expected));
            assert_eq!(rounds(&copy), BTreeSet::from([expected]));
        }
        // The snapshots are files of their own: the store goes on, and closes, without them.
        commit_round(&mut store, 4);
        store.close().unwrap();
    }
}

#[test]
fn a_capture_while_the_writer_commits_holds_exactly_the_commit_it_names() {
    // An 8 KiB bound spills every commit (several writes each): the capture must never land
    // between them.
    for bound in [64 << 20, 8 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), bound, Durability::Wal);
        commit_round(&mut store, 0);
        let files = store.committed_files().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let capturing = {
            let done = Arc::clone(&done);
            let root = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let mut captured = Vec::new();
                let mut i = 0;
                while !done.load(Ordering::Relaxed) || captured.is_empty() {
                    let at = root.join(format!("capture-{i}"));
                    let offset = files.capture(&at).unwrap().unwrap();
                    captured.push((at, offset));
                    i += 1;
                }
                captured
            })
        };
        for n in 1..40 {
            commit_round(&mut store, n);
        }
        done.store(true, Ordering::Relaxed);
        let captured = capturing.join().unwrap();
        store.close().unwrap();
        assert!(!captured.is_empty());
        for (at, offset) in captured {
            let mut hashes = FileHashes::default();
            let (files, _) = hashes.describe(&at).unwrap();
            let manifest = SnapshotManifest {
                offset,
                batch_id: None,
                kind: StoreKind::KeyValue,
                created_ms: 0,
                files,
            };
            let restored = tempfile::tempdir().unwrap();
            place(&at, &manifest, &restored.path().join("store"));
            let copy = open(restored.path(), 64 << 20, Durability::Wal);
            assert_eq!(copy.committed_offset().unwrap(), Some(offset));
            assert_eq!(
                rounds(&copy),
                BTreeSet::from([offset]),
                "bound {bound}: the files hold the commit of offset {offset} only"
            );
        }
    }
}

#[test]
fn stores_without_committed_files_cannot_be_snapshotted() {
    let memory = KeyValueStore::open_in_memory("m", options(1 << 20, Durability::Wal));
    assert!(memory.committed_files().is_err());
    let dir = tempfile::tempdir().unwrap();
    let mut non_transactional = options(1 << 20, Durability::Wal);
    non_transactional.transactional = false;
    let (store, _) = KeyValueStore::open_rocksdb(
        "s",
        &dir.path().join("store"),
        &dir.path().join(".s.uncommitted"),
        ValueFormat::Plain,
        non_transactional,
        &mut |_| {},
    )
    .unwrap();
    assert!(store.committed_files().is_err());

    let mut fresh = open(&dir.path().join("fresh"), 1 << 20, Durability::Wal);
    let files = fresh.committed_files().unwrap();
    let at = dir.path().join("never");
    assert_eq!(files.capture(&at).unwrap(), None, "nothing committed yet");
    assert!(!at.exists());
    fresh.close().unwrap();
    assert!(
        files.capture(&at).is_err(),
        "a closed store captures nothing"
    );
}
