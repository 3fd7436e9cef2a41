//! Rebalance metadata (spec 2.3-2.7): byte vectors laid out by hand from the spec's tables,
//! modified UTF-8, future versions, malformed input, randomized round trips and mutations, and
//! the group simulator.
//!
//! The spec's section 6 has no SubscriptionInfo / AssignmentInfo vectors, so every vector here
//! is *derived*: written field by field from the layout tables, never produced by the encoder.

use std::collections::BTreeSet;

use kstate_core::rebalance::simulator::{GroupSimulator, Release, SimulatorConfig};
use kstate_core::rebalance::{
    modified_utf8, AssignmentInfo, DecodedSubscription, HostInfo, ProbingProtocol,
    SubscriptionInfo, TaskId, TopicPartition, UpgradeFrom, LATEST_OFFSET, LATEST_SUPPORTED_VERSION,
    NO_NEXT_REBALANCE, UNKNOWN, UNKNOWN_OFFSET_SUM,
};
use kstate_core::Error;

fn unhex(parts: &[&str]) -> Vec<u8> {
    let digits: Vec<u8> = parts
        .concat()
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    assert_eq!(digits.len() % 2, 0, "odd hex in {parts:?}");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn known(bytes: &[u8]) -> SubscriptionInfo {
    match SubscriptionInfo::decode(bytes).unwrap() {
        DecodedSubscription::Known(info) => info,
        future => panic!("expected a known version, got {future:?}"),
    }
}

fn corrupted_message(result: kstate_core::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Corrupted(message)) => message,
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

const PID: &str = "00112233445566778899aabbccddeeff";
const PROCESS_ID: [u8; 16] = [
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
];
/// bytes(i32) "localhost:8080"
const ENDPOINT: &str = "0000000e 6c6f63616c686f73743a38303830";

// ---------------------------------------------------------------------------------------------
// SubscriptionInfo vectors (spec 2.3)

/// prevTasks {0_1} (offset sum -2) and standbyTasks {1_2} (-3): what v1-6 can carry.
fn subscription_v1_to_6(version: i32, latest: i32, endpoint: bool) -> SubscriptionInfo {
    let mut info = SubscriptionInfo::new(version, latest, PROCESS_ID);
    info.task_offset_sums
        .insert(TaskId::new(0, 1), LATEST_OFFSET);
    info.task_offset_sums
        .insert(TaskId::new(1, 2), UNKNOWN_OFFSET_SUM);
    if endpoint {
        info.user_endpoint = Some("localhost:8080".into());
    }
    info
}

/// {0_0: -2, 0_1: 100, 1_0: -3} (+ named task tp__2_3: 5 from v10).
fn subscription_v7_plus(version: i32) -> SubscriptionInfo {
    let mut info = SubscriptionInfo::new(version, LATEST_SUPPORTED_VERSION, PROCESS_ID);
    info.user_endpoint = Some("localhost:8080".into());
    info.task_offset_sums
        .insert(TaskId::new(0, 0), LATEST_OFFSET);
    info.task_offset_sums.insert(TaskId::new(0, 1), 100);
    info.task_offset_sums
        .insert(TaskId::new(1, 0), UNKNOWN_OFFSET_SUM);
    if version >= 10 {
        info.task_offset_sums.insert(TaskId::named(2, 3, "tp"), 5);
    }
    if version >= 8 {
        info.unique_field = -1;
    }
    if version >= 9 {
        info.error_code = 4;
    }
    if version >= 11 {
        info.client_tags.insert("az".into(), "us-east-1a".into());
    }
    info
}

const TASKS_V1_TO_6: &str = "00000001 00000000 00000001   00000001 00000001 00000002";
/// Grouped by subtopology: [0: (0, -2), (1, 100)], [1: (0, -3)].
const OFFSET_SUMS_V7_TO_9: &str = "00000002
    00000000 00000002  00000000 fffffffffffffffe  00000001 0000000000000064
    00000001 00000001  00000000 fffffffffffffffd";
/// Flat: (0,0,-2,null) (0,1,100,null) (1,0,-3,null) (2,3,5,"tp").
const OFFSET_SUMS_V10: &str = "00000004
    00000000 00000000 fffffffffffffffe ffff
    00000000 00000001 0000000000000064 ffff
    00000001 00000000 fffffffffffffffd ffff
    00000002 00000003 0000000000000005 0002 7470";
const CLIENT_TAGS: &str = "00000001  00000002 617a  0000000a 75732d656173742d3161";

fn subscription_vectors() -> Vec<(SubscriptionInfo, Vec<u8>)> {
    let mut vectors = vec![
        (
            subscription_v1_to_6(1, UNKNOWN, false),
            unhex(&["00000001", PID, TASKS_V1_TO_6]),
        ),
        (
            subscription_v1_to_6(2, UNKNOWN, true),
            unhex(&["00000002", PID, TASKS_V1_TO_6, ENDPOINT]),
        ),
        // No endpoint: empty bytes.
        (
            subscription_v1_to_6(2, UNKNOWN, false),
            unhex(&["00000002", PID, TASKS_V1_TO_6, "00000000"]),
        ),
    ];
    for version in 3..=6 {
        vectors.push((
            subscription_v1_to_6(version, 11, true),
            unhex(&[
                &format!("{version:08x} 0000000b"),
                PID,
                TASKS_V1_TO_6,
                ENDPOINT,
            ]),
        ));
    }
    let head = |version: i32| format!("{version:08x} 0000000b {PID} {ENDPOINT}");
    vectors.extend([
        (
            subscription_v7_plus(7),
            unhex(&[&head(7), OFFSET_SUMS_V7_TO_9]),
        ),
        (
            subscription_v7_plus(8),
            unhex(&[&head(8), OFFSET_SUMS_V7_TO_9, "ff"]),
        ),
        (
            subscription_v7_plus(9),
            unhex(&[&head(9), OFFSET_SUMS_V7_TO_9, "ff 00000004"]),
        ),
        (
            subscription_v7_plus(10),
            unhex(&[&head(10), OFFSET_SUMS_V10, "ff 00000004"]),
        ),
        (
            subscription_v7_plus(11),
            unhex(&[&head(11), OFFSET_SUMS_V10, "ff 00000004", CLIENT_TAGS]),
        ),
    ]);
    vectors
}

#[test]
fn subscription_vectors_encode_and_decode_byte_exact() {
    let vectors = subscription_vectors();
    let versions: BTreeSet<i32> = vectors.iter().map(|(info, _)| info.version).collect();
    assert_eq!(versions, (1..=11).collect(), "a vector for every version");
    for (info, bytes) in vectors {
        assert_eq!(
            hex(&info.encode().unwrap()),
            hex(&bytes),
            "encode v{}",
            info.version
        );
        assert_eq!(known(&bytes), info, "decode v{}", info.version);
    }
}

#[test]
fn v1_to_v6_carry_only_running_or_not() {
    // Offset sums other than -2 become standby tasks (decoded as -3), as in Kafka.
    let mut info = SubscriptionInfo::new(6, 11, PROCESS_ID);
    info.task_offset_sums.insert(TaskId::new(0, 0), 1234);
    info.task_offset_sums
        .insert(TaskId::new(0, 1), LATEST_OFFSET);
    let decoded = known(&info.encode().unwrap());
    assert_eq!(
        decoded.prev_tasks().collect::<Vec<_>>(),
        [&TaskId::new(0, 1)]
    );
    assert_eq!(
        decoded.task_offset_sums[&TaskId::new(0, 0)],
        UNKNOWN_OFFSET_SUM
    );
}

#[test]
fn subscription_encode_rejects_what_the_version_cannot_carry() {
    let named = |version| {
        let mut info = SubscriptionInfo::new(version, 11, PROCESS_ID);
        info.task_offset_sums.insert(TaskId::named(0, 0, "x"), 1);
        info
    };
    let mut cases = vec![named(9), named(3)];
    let mut v7 = SubscriptionInfo::new(7, 11, PROCESS_ID);
    v7.unique_field = 1;
    cases.push(v7);
    let mut v10 = SubscriptionInfo::new(10, 11, PROCESS_ID);
    v10.client_tags.insert("k".into(), "v".into());
    cases.push(v10);
    let mut v1 = SubscriptionInfo::new(1, UNKNOWN, PROCESS_ID);
    v1.user_endpoint = Some("h:1".into());
    cases.push(v1);
    let mut v2 = SubscriptionInfo::new(2, UNKNOWN, PROCESS_ID);
    v2.latest_supported_version = 11;
    cases.push(v2);
    cases.push(SubscriptionInfo::new(5, 4, PROCESS_ID));
    cases.push(SubscriptionInfo::new(12, 12, PROCESS_ID));
    cases.push(SubscriptionInfo::new(0, 11, PROCESS_ID));
    for info in cases {
        assert!(
            matches!(info.encode(), Err(Error::InvalidArgument(_))),
            "{info:?}"
        );
    }
}

#[test]
fn newer_subscription_is_read_from_its_first_eight_bytes_only() {
    // Version 12 with garbage after the two version fields, and version 99 with nothing after.
    let bytes = unhex(&["0000000c 0000000d", "deadbeef"]);
    assert_eq!(
        SubscriptionInfo::decode(&bytes).unwrap(),
        DecodedSubscription::Future {
            version: 12,
            latest_supported_version: 13
        }
    );
    let bytes = unhex(&["00000063 00000063"]);
    assert_eq!(SubscriptionInfo::decode(&bytes).unwrap().version(), 99);
    // Fewer than 8 bytes is not a subscription.
    let message = corrupted_message(SubscriptionInfo::decode(&unhex(&["0000000c 0000"])));
    assert!(message.contains("latestSupportedVersion"), "{message}");

    // An older release reads a v11 subscription as future; before version 3 it cannot.
    let v11 = subscription_v7_plus(11).encode().unwrap();
    assert_eq!(
        SubscriptionInfo::decode_as(&v11, 5).unwrap(),
        DecodedSubscription::Future {
            version: 11,
            latest_supported_version: 11
        }
    );
    corrupted_message(SubscriptionInfo::decode_as(&v11, 2));
    let v2 = subscription_v1_to_6(2, UNKNOWN, true).encode().unwrap();
    corrupted_message(SubscriptionInfo::decode_as(&v2, 1));
    assert_eq!(known(&v2).version, 2);
}

// ---------------------------------------------------------------------------------------------
// AssignmentInfo vectors (spec 2.4)

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

/// active [0_0, 0_1], standby {1_0: {t-0}}, host h:8080 -> {t-0, t-1}; v6+ also standby host
/// g:9090 -> {a-5}; v10+ the standby task is named "é😀" and the host is "hé".
fn assignment(version: i32) -> AssignmentInfo {
    let mut info = AssignmentInfo::new(version, version);
    info.active_tasks = vec![TaskId::new(0, 0), TaskId::new(0, 1)];
    let standby = if version >= 10 {
        TaskId::named(1, 0, "é😀")
    } else {
        TaskId::new(1, 0)
    };
    info.standby_tasks
        .insert(standby, BTreeSet::from([tp("t", 0)]));
    let host = if version >= 10 { "hé" } else { "h" };
    if version >= 2 {
        info.partitions_by_host.insert(
            HostInfo::new(host, 8080),
            BTreeSet::from([tp("t", 0), tp("t", 1)]),
        );
    }
    if version >= 6 {
        info.standby_partitions_by_host
            .insert(HostInfo::new("g", 9090), BTreeSet::from([tp("a", 5)]));
    }
    if version >= 4 {
        info.error_code = 3;
    }
    if version >= 7 {
        info.next_rebalance_ms = 1_700_000_000_000; // 0x18bcfe56800
    }
    info
}

const ACTIVE: &str = "00000002 00000000 00000000 00000000 00000001";
/// standby {1_0: {t-0}}: TaskId, then i32 count and (UTF "t", i32 0).
const STANDBY: &str = "00000001 00000001 00000000 00000001 0001 74 00000000";
/// HostMap(v<=4): h:8080 -> {t-0, t-1}.
const HOST_MAP: &str = "00000001 0001 68 00001f90 00000002 0001 74 00000000 0001 74 00000001";
/// Dictionary {0: t}, HostMapDict h:8080 -> {(0,0), (0,1)}.
const DICT_HOST_MAP_V5: &str =
    "00000001 00000000 0001 74   00000001 0001 68 00001f90 00000002 00000000 00000000 00000000 00000001";
/// Dictionary {0: a, 1: t}; active h:8080 -> {(1,0),(1,1)}; standby g:9090 -> {(0,5)}.
const DICT_HOST_MAPS_V6: &str = "00000002 00000000 0001 61 00000001 0001 74
    00000001 0001 68 00001f90 00000002 00000001 00000000 00000001 00000001
    00000001 0001 67 00002382 00000001 00000000 00000005";
/// v10+: task ids carry a UTF-16 char count and chars; host "hé" in modified UTF-8.
const ACTIVE_V10: &str = "00000002 00000000 00000000 00000000 00000000 00000001 00000000";
const STANDBY_V10: &str =
    "00000001 00000001 00000000 00000003 00e9 d83d de00 00000001 0001 74 00000000";
const DICT_HOST_MAPS_V10: &str = "00000002 00000000 0001 61 00000001 0001 74
    00000001 0003 68c3a9 00001f90 00000002 00000001 00000000 00000001 00000001
    00000001 0001 67 00002382 00000001 00000000 00000005";
const NEXT_REBALANCE: &str = "0000018bcfe56800";

fn assignment_vectors() -> Vec<(AssignmentInfo, Vec<u8>)> {
    let v = |version: i32| format!("{version:08x}");
    let vc = |version: i32| format!("{version:08x} {version:08x}");
    vec![
        (assignment(1), unhex(&[&v(1), ACTIVE, STANDBY])),
        (assignment(2), unhex(&[&v(2), ACTIVE, STANDBY, HOST_MAP])),
        (assignment(3), unhex(&[&vc(3), ACTIVE, STANDBY, HOST_MAP])),
        (
            assignment(4),
            unhex(&[&vc(4), ACTIVE, STANDBY, HOST_MAP, "00000003"]),
        ),
        (
            assignment(5),
            unhex(&[&vc(5), ACTIVE, STANDBY, DICT_HOST_MAP_V5, "00000003"]),
        ),
        (
            assignment(6),
            unhex(&[&vc(6), ACTIVE, STANDBY, DICT_HOST_MAPS_V6, "00000003"]),
        ),
        (
            assignment(7),
            unhex(&[
                &vc(7),
                ACTIVE,
                STANDBY,
                DICT_HOST_MAPS_V6,
                "00000003",
                NEXT_REBALANCE,
            ]),
        ),
        (
            assignment(8),
            unhex(&[
                &vc(8),
                ACTIVE,
                STANDBY,
                DICT_HOST_MAPS_V6,
                "00000003",
                NEXT_REBALANCE,
            ]),
        ),
        (
            assignment(9),
            unhex(&[
                &vc(9),
                ACTIVE,
                STANDBY,
                DICT_HOST_MAPS_V6,
                "00000003",
                NEXT_REBALANCE,
            ]),
        ),
        (
            assignment(10),
            unhex(&[
                &vc(10),
                ACTIVE_V10,
                STANDBY_V10,
                DICT_HOST_MAPS_V10,
                "00000003",
                NEXT_REBALANCE,
            ]),
        ),
        (
            assignment(11),
            unhex(&[
                &vc(11),
                ACTIVE_V10,
                STANDBY_V10,
                DICT_HOST_MAPS_V10,
                "00000003",
                NEXT_REBALANCE,
            ]),
        ),
    ]
}

#[test]
fn assignment_vectors_encode_and_decode_byte_exact() {
    for (info, bytes) in assignment_vectors() {
        assert_eq!(
            hex(&info.encode().unwrap()),
            hex(&bytes),
            "encode v{}",
            info.version
        );
        assert_eq!(
            AssignmentInfo::decode(&bytes).unwrap(),
            info,
            "decode v{}",
            info.version
        );
    }
}

#[test]
fn assignment_v1_v2_have_no_commonly_supported_version() {
    let decoded = AssignmentInfo::decode(&assignment(2).encode().unwrap()).unwrap();
    assert_eq!(decoded.commonly_supported_version, UNKNOWN);
    assert_eq!(decoded.next_rebalance_ms, NO_NEXT_REBALANCE);
}

#[test]
fn dictionary_is_read_by_index_in_any_order() {
    // Kafka writes the dictionary in HashMap order: {1: t} before {0: a} here.
    let bytes = unhex(&[
        "00000006 00000006",
        "00000000 00000000",
        "00000002 00000001 0001 74 00000000 0001 61",
        "00000001 0001 68 00001f90 00000002 00000001 00000000 00000000 00000007",
        "00000000 00000000",
    ]);
    let info = AssignmentInfo::decode(&bytes).unwrap();
    assert_eq!(
        info.partitions_by_host[&HostInfo::new("h", 8080)],
        BTreeSet::from([tp("t", 0), tp("a", 7)])
    );
}

#[test]
fn active_tasks_keep_order_and_duplicates() {
    let mut info = AssignmentInfo::new(11, 11);
    info.active_tasks = vec![TaskId::new(1, 0), TaskId::new(0, 0), TaskId::new(1, 0)];
    assert_eq!(
        AssignmentInfo::decode(&info.encode().unwrap()).unwrap(),
        info
    );
}

#[test]
fn error_assignment_is_latest_version_and_empty() {
    let bytes = AssignmentInfo::error_assignment(4).encode().unwrap();
    assert_eq!(
        hex(&bytes),
        hex(&unhex(&[
            "0000000b 0000000b 00000000 00000000 00000000 00000000 00000000 00000004",
            "7fffffffffffffff"
        ]))
    );
}

#[test]
fn assignment_encode_rejects_what_the_version_cannot_carry() {
    let mut named = AssignmentInfo::new(9, 9);
    named.active_tasks.push(TaskId::named(0, 0, "x"));
    let mut v1_hosts = assignment(1);
    v1_hosts
        .partitions_by_host
        .insert(HostInfo::new("h", 1), BTreeSet::new());
    let mut v5_standby_hosts = assignment(5);
    v5_standby_hosts
        .standby_partitions_by_host
        .insert(HostInfo::new("h", 1), BTreeSet::new());
    let mut v3_error = assignment(3);
    v3_error.error_code = 1;
    let mut v6_next = assignment(6);
    v6_next.next_rebalance_ms = 0;
    let mut v2_commonly = assignment(2);
    v2_commonly.commonly_supported_version = 2;
    let mut long_topic = assignment(1);
    long_topic.standby_tasks.insert(
        TaskId::new(9, 9),
        BTreeSet::from([tp(&"x".repeat(65_536), 0)]),
    );
    for info in [
        named,
        v1_hosts,
        v5_standby_hosts,
        v3_error,
        v6_next,
        v2_commonly,
        long_topic,
        AssignmentInfo::new(12, 12),
    ] {
        assert!(
            matches!(info.encode(), Err(Error::InvalidArgument(_))),
            "{info:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Modified UTF-8 and UTF-16 chars

#[test]
fn modified_utf8_matches_java_write_utf() {
    let cases: [(&str, &str); 6] = [
        ("", ""),
        ("abc", "616263"),
        ("\u{0}", "c080"),
        ("é", "c3a9"),
        ("€", "e282ac"),
        // U+1F600 as the surrogates D83D DE00, three bytes each.
        ("😀", "eda0bd edb880"),
    ];
    for (text, expected) in cases {
        assert_eq!(
            hex(&modified_utf8::encode(text)),
            hex(&unhex(&[expected])),
            "{text:?}"
        );
        assert_eq!(modified_utf8::decode(&unhex(&[expected])).unwrap(), text);
    }
    // readUTF also accepts a raw zero byte and over-long forms.
    assert_eq!(modified_utf8::decode(&[0x00]).unwrap(), "\u{0}");
    assert_eq!(modified_utf8::decode(&[0xc1, 0x81]).unwrap(), "A");
    for bad in ["80", "c3", "c328", "e282", "f09f9880", "eda0bd", "edb880"] {
        assert!(modified_utf8::decode(&unhex(&[bad])).is_err(), "{bad}");
    }
}

#[test]
fn strings_in_assignments_use_modified_utf8() {
    let mut info = AssignmentInfo::new(2, UNKNOWN);
    info.partitions_by_host
        .insert(HostInfo::new("a\u{0}😀", 1), BTreeSet::new());
    let bytes = info.encode().unwrap();
    let expected = unhex(&[
        "00000002 00000000 00000000",
        "00000001 0009 61 c080 eda0bd edb880 00000001 00000000",
    ]);
    assert_eq!(hex(&bytes), hex(&expected));
    assert_eq!(AssignmentInfo::decode(&bytes).unwrap(), info);
}

// ---------------------------------------------------------------------------------------------
// Malformed input

#[test]
fn malformed_subscriptions_name_the_field() {
    let v7 = subscription_v7_plus(7).encode().unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "SubscriptionInfo: version"),
        (unhex(&["000000"]), "version"),
        (unhex(&["00000000"]), "unknown version 0"),
        (unhex(&["ffffffff 0000000b"]), "unknown version -1"),
        (
            unhex(&["00000003 00000002", PID, "00000000 00000000 00000000"]),
            "v3: latestSupportedVersion",
        ),
        (
            unhex(&["00000001", PID, "7fffffff"]),
            "v1: prevTasks: count 2147483647",
        ),
        (
            unhex(&["00000001", PID, "ffffffff"]),
            "v1: prevTasks: count -1",
        ),
        (
            unhex(&["00000001", PID, "00000000 00000000 00"]),
            "v1: 1 bytes left",
        ),
        (
            unhex(&["00000002", PID, "00000000 00000000 fffffffe"]),
            "v2: userEndPoint: negative length",
        ),
        (
            unhex(&["00000002", PID, "00000000 00000000 00000002 c328"]),
            "v2: userEndPoint: invalid UTF-8",
        ),
        (
            unhex(&["00000002", PID, "00000000 00000000 00000010 6869"]),
            "v2: userEndPoint: needs 16 bytes",
        ),
        (
            v7[..v7.len() - 3].to_vec(),
            "v7: partitionToOffsetSum: count 1 does not fit",
        ),
        (
            unhex(&[
                "0000000a 0000000b",
                PID,
                "00000000 00000001 00000000 00000000 0000000000000001 fffe ff 00000000",
            ]),
            "v10: taskOffsetSums namedTopology: negative string length -2",
        ),
        (
            unhex(&[
                "0000000b 0000000b",
                PID,
                "00000000 00000000 00 00000000 00000001 00000001",
            ]),
            "v11: clientTags",
        ),
    ];
    for (bytes, expected) in cases {
        let message = corrupted_message(SubscriptionInfo::decode(&bytes));
        assert!(
            message.contains(expected),
            "{expected:?} not in {message:?}"
        );
    }
}

#[test]
fn malformed_assignments_name_the_field() {
    let v6 = assignment(6).encode().unwrap();
    let mut trailing = v6.clone();
    trailing.push(0);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "AssignmentInfo: version"),
        (unhex(&["0000000c 0000000c"]), "unknown version 12"),
        (unhex(&["00000000"]), "unknown version 0"),
        (unhex(&["00000001 00000001 00000000"]), "v1: activeTasks"),
        (unhex(&["00000001 7ffffff0"]), "v1: activeTasks: count 2147483632"),
        (unhex(&["0000000a 0000000a 00000001 00000000 00000000 00000001 d800"]), "unpaired surrogate"),
        (unhex(&["00000001 00000000 00000001 00000000 00000000 00000001 0002 c328 00000000"]), "not a continuation byte"),
        (
            unhex(&["00000005 00000005 00000000 00000000 00000000 00000001 0001 68 00000001 00000001 00000009 00000000 00000000"]),
            "v5: partitionsByHost: topic index 9 is not in the dictionary",
        ),
        (trailing, "v6: 1 bytes left after the last field"),
        (v6[..v6.len() - 1].to_vec(), "v6: errCode"),
    ];
    for (bytes, expected) in cases {
        let message = corrupted_message(AssignmentInfo::decode(&bytes));
        assert!(
            message.contains(expected),
            "{expected:?} not in {message:?}"
        );
    }
    // A receiver of an older release cannot read a newer assignment.
    let v7 = assignment(7).encode().unwrap();
    assert!(corrupted_message(AssignmentInfo::decode_as(&v7, 6)).contains("reads 1 to 6"));
}

// ---------------------------------------------------------------------------------------------
// Randomized round trips and mutations (deterministic)

/// xorshift64: deterministic, no dependency.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn text(&mut self) -> String {
        const PIECES: [&str; 8] = ["a", "topic", "-", "é", "\u{0}", "😀", "€", "Z9"];
        (0..1 + self.below(4))
            .map(|_| PIECES[self.below(PIECES.len())])
            .collect()
    }

    fn task(&mut self, version: i32) -> TaskId {
        let name = if version >= 10 && self.below(3) == 0 {
            self.text()
        } else {
            String::new()
        };
        TaskId::named(self.below(4) as i32, self.below(8) as i32, &name)
    }
}

fn random_subscription(rng: &mut Prng, version: i32) -> SubscriptionInfo {
    let latest = if version >= 3 {
        version + rng.below(3) as i32
    } else {
        UNKNOWN
    };
    let mut process_id = [0u8; 16];
    process_id.iter_mut().for_each(|b| *b = rng.next() as u8);
    let mut info = SubscriptionInfo::new(version, latest, process_id);
    if version >= 2 && rng.below(2) == 0 {
        info.user_endpoint = Some(format!("{}:{}", rng.text(), rng.below(65_536)));
    }
    for _ in 0..rng.below(6) {
        let sum = if version < 7 {
            [LATEST_OFFSET, UNKNOWN_OFFSET_SUM][rng.below(2)]
        } else {
            rng.next() as i64
        };
        info.task_offset_sums.insert(rng.task(version), sum);
    }
    if version >= 8 {
        info.unique_field = rng.next() as i8;
    }
    if version >= 9 {
        info.error_code = rng.below(5) as i32;
    }
    if version >= 11 {
        for _ in 0..rng.below(3) {
            info.client_tags.insert(rng.text(), rng.text());
        }
    }
    info
}

fn random_partitions(rng: &mut Prng) -> BTreeSet<TopicPartition> {
    (0..rng.below(4))
        .map(|_| TopicPartition::new(&rng.text(), rng.below(10) as i32))
        .collect()
}

fn random_assignment(rng: &mut Prng, version: i32) -> AssignmentInfo {
    let mut info = AssignmentInfo::new(version, version + rng.below(3) as i32);
    for _ in 0..rng.below(5) {
        info.active_tasks.push(rng.task(version));
    }
    for _ in 0..rng.below(4) {
        info.standby_tasks
            .insert(rng.task(version), random_partitions(rng));
    }
    if version >= 2 {
        for _ in 0..rng.below(3) {
            let host = HostInfo::new(&rng.text(), rng.below(65_536) as i32);
            info.partitions_by_host.insert(host, random_partitions(rng));
        }
    }
    if version >= 6 {
        for _ in 0..rng.below(3) {
            let host = HostInfo::new(&rng.text(), rng.below(65_536) as i32);
            info.standby_partitions_by_host
                .insert(host, random_partitions(rng));
        }
    }
    if version >= 4 {
        info.error_code = rng.below(5) as i32;
    }
    if version >= 7 {
        info.next_rebalance_ms = [0, NO_NEXT_REBALANCE, rng.next() as i64][rng.below(3)];
    }
    info
}

fn mutate(bytes: &mut Vec<u8>, rng: &mut Prng) {
    if bytes.is_empty() {
        bytes.push(rng.next() as u8);
        return;
    }
    match rng.below(4) {
        0 => {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
        }
        1 => {
            let interesting = [-1i32, 0, 1, 2, 11, 12, 0x7fff_ffff, i32::MIN, 0xffff];
            let value = interesting[rng.below(interesting.len())];
            let at = rng.below(bytes.len());
            for (i, byte) in value.to_be_bytes().into_iter().enumerate() {
                if let Some(slot) = bytes.get_mut(at + i) {
                    *slot = byte;
                }
            }
        }
        2 => bytes.truncate(rng.below(bytes.len())),
        _ => {
            let at = rng.below(bytes.len() + 1);
            bytes.insert(at, rng.next() as u8);
        }
    }
}

#[test]
fn randomized_round_trips_of_every_version() {
    let mut rng = Prng(0x9E37_79B9_7F4A_7C15);
    for round in 0..3_000 {
        let version = 1 + round % 11;
        let subscription = random_subscription(&mut rng, version);
        let bytes = subscription.encode().unwrap();
        assert_eq!(known(&bytes), subscription);

        let assignment = random_assignment(&mut rng, version);
        let bytes = assignment.encode().unwrap();
        assert_eq!(AssignmentInfo::decode(&bytes).unwrap(), assignment);
    }
}

#[test]
fn mutated_bytes_decode_or_fail_as_corrupted_never_panic() {
    let mut rng = Prng(0x2545_F491_4F6C_DD1D);
    let mut accepted = 0;
    for round in 0..20_000 {
        let version = 1 + round % 11;
        let mut bytes = if round % 2 == 0 {
            random_subscription(&mut rng, version).encode().unwrap()
        } else {
            random_assignment(&mut rng, version).encode().unwrap()
        };
        for _ in 0..=rng.below(3) {
            mutate(&mut bytes, &mut rng);
        }
        match SubscriptionInfo::decode(&bytes) {
            Ok(DecodedSubscription::Known(info)) => {
                accepted += 1;
                // Whatever decodes re-encodes to something that decodes the same.
                assert_eq!(known(&info.encode().unwrap()), info);
            }
            Ok(DecodedSubscription::Future { .. }) => {}
            Err(error) => assert!(matches!(error, Error::Corrupted(_)), "{error:?}"),
        }
        match AssignmentInfo::decode(&bytes) {
            Ok(info) => {
                accepted += 1;
                assert_eq!(
                    AssignmentInfo::decode(&info.encode().unwrap()).unwrap(),
                    info
                );
            }
            Err(error) => assert!(matches!(error, Error::Corrupted(_)), "{error:?}"),
        }
    }
    assert!(
        accepted > 1_000,
        "mutations should not all be rejected: {accepted}"
    );
}

// ---------------------------------------------------------------------------------------------
// Simulator smoke test (the full matrix is in tests/rebalance/ on the Python side)

#[test]
fn rolling_upgrade_to_a_simulated_version_12_with_the_leader_last() {
    for protocol in [ProbingProtocol::Kip268, ProbingProtocol::Current] {
        let config = SimulatorConfig {
            tasks: 6,
            standby_replicas: 1,
            protocol,
        };
        let old = Release {
            latest_supported_version: 11,
            upgrade_from: None,
        };
        let new = Release {
            latest_supported_version: 12,
            upgrade_from: None,
        };
        let mut group = GroupSimulator::new(config).unwrap();
        for name in ["a", "b", "c"] {
            assert_eq!(group.start(name, old).unwrap(), 1);
        }
        assert_eq!(group.settled_version(), Some(11));
        // Followers first: each new instance probes once (2 rebalances on start).
        assert_eq!(group.bounce("b", new).unwrap(), 1 + 2);
        assert_eq!(group.bounce("c", new).unwrap(), 1 + 2);
        assert_eq!(group.settled_version(), Some(11));
        // The old leader leaves last: one more rebalance moves the group to 12.
        assert_eq!(group.stop("a").unwrap(), 2);
        assert_eq!(group.settled_version(), Some(12));
        assert_eq!(group.start("a", new).unwrap(), 1);
        assert_eq!(group.settled_version(), Some(12));
        for record in group.history() {
            assert!(record.violations.is_empty(), "{protocol:?}: {record:?}");
            assert!(record.failure.is_none(), "{protocol:?}: {record:?}");
        }
    }
}

#[test]
fn upgrade_from_0_10_0_forces_version_1() {
    assert_eq!(
        UpgradeFrom::parse("0.10.0")
            .unwrap()
            .forced_subscription_version(),
        Some(1)
    );
}
