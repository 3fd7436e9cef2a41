//! The order of many byte-slice keys, as RocksDB's bytewise comparator orders them. A batch's
//! keys share runs of leading bytes (a pickled grouping key's header, its frame length, a
//! length prefix), which a comparison of slices reads again every time: here keys are sorted by
//! 8 bytes at a time, as one integer, and a run of keys equal so far is sorted by its next 8.

/// The positions of `keys` (a batch's: fewer than 2^32) in byte order, equal keys in any order
/// among themselves.
pub fn key_order(keys: &[&[u8]]) -> Vec<u32> {
    let mut order: Vec<(u64, u32)> = (0..keys.len() as u32).map(|i| (0, i)).collect();
    sort_from(keys, &mut order, 0);
    order.into_iter().map(|(_, i)| i).collect()
}

/// How deep runs of equal keys are sorted 8 bytes at a time; past it, by their slices (keys
/// agreeing on this many bytes are rare, and the recursion stays shallow).
const MAX_DEPTH: usize = 64;

/// Sorts `run`, whose keys agree on their first `depth` bytes, by the bytes from `depth` on.
fn sort_from(keys: &[&[u8]], run: &mut [(u64, u32)], depth: usize) {
    if run.len() < 2 {
        return;
    }
    if depth >= MAX_DEPTH {
        let rest = |i: u32| keys[i as usize].get(depth..).unwrap_or_default();
        run.sort_unstable_by(|a, b| rest(a.1).cmp(rest(b.1)));
        return;
    }
    for (head, i) in run.iter_mut() {
        *head = head_at(keys[*i as usize], depth);
    }
    run.sort_unstable_by_key(|&(head, _)| head);
    for equal in run.chunk_by_mut(|a, b| a.0 == b.0) {
        if equal.len() < 2 {
            continue;
        }
        // Equal heads: a key that ends inside them is a prefix of every longer one (its padding
        // zeros matched their bytes), so the ended keys come first, shortest first.
        equal.sort_unstable_by_key(|&(_, i)| keys[i as usize].len().min(depth + 9));
        let ended = equal.partition_point(|&(_, i)| keys[i as usize].len() <= depth + 8);
        sort_from(keys, &mut equal[ended..], depth + 8);
    }
}

/// Bytes `depth..depth + 8` of `key` as a big-endian integer, zero-padded past its end: if
/// `head_at(a) < head_at(b)` for keys agreeing before `depth`, then `a < b` in byte order.
fn head_at(key: &[u8], depth: usize) -> u64 {
    let rest = key.get(depth..).unwrap_or_default();
    let mut bytes = [0u8; 8];
    let n = rest.len().min(8);
    bytes[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `keys` in the order [`key_order`] gives, checked against the slices' own sort.
    fn check(keys: &[Vec<u8>]) {
        let slices: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let ordered: Vec<&[u8]> = key_order(&slices)
            .into_iter()
            .map(|i| slices[i as usize])
            .collect();
        let mut expected = slices.clone();
        expected.sort_unstable();
        assert_eq!(ordered, expected, "keys {keys:?}");
    }

    #[test]
    fn shared_heads_shorter_keys_zeros_and_repeats_come_in_byte_order() {
        check(&[]);
        check(&[b"only".to_vec()]);
        // A key that ends where another goes on with zero bytes: equal heads, the shorter first.
        check(&[
            vec![7, 1, 0],
            vec![7, 1],
            vec![7, 1, 0, 0],
            vec![7],
            vec![7, 0],
        ]);
        // Longer than the head past the common prefix, differing only after it.
        let long = |last: u8| [b"header--".as_slice(), &[1; 12], &[last]].concat();
        check(&[long(3), long(1), long(2), long(1), b"header--".to_vec()]);
        // No common prefix; an empty key.
        check(&[
            b"b".to_vec(),
            vec![],
            b"a".to_vec(),
            vec![0xff; 9],
            vec![0; 9],
        ]);
        // Agreeing past the depth sorted 8 bytes at a time.
        let deep = |tail: &[u8]| [&[5; 100][..], tail].concat();
        check(&[deep(b"b"), deep(b""), deep(b"a"), deep(b"a\0"), deep(b"b")]);
    }

    #[test]
    fn pickled_grouping_keys_of_every_length_come_in_byte_order() {
        // Keys as the processor's stores write them (a pickled `("u<n>",)`, its length prefix),
        // shuffled by a fixed LCG: their first ~11-15 bytes agree or differ by the length alone.
        let mut state = 7u64;
        let mut keys = Vec::new();
        for _ in 0..5_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let user = format!("u{}", state >> 47);
            let pickled = [
                &[0x80, 4, 0x95][..],
                &(user.len() as u64 + 8).to_le_bytes(),
                &[0x8c, user.len() as u8],
                user.as_bytes(),
                &[0x94, 0x85, 0x94, b'.'],
            ]
            .concat();
            keys.push([&(pickled.len() as u32).to_be_bytes()[..], &pickled].concat());
            keys.push(pickled);
        }
        check(&keys);
    }
}
