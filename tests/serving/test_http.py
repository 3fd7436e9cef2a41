"""``kstate serve``: a real server process on loopback answering a real HTTP client. Every answer
equals the plain-Python state of the batch it names, while the application writes; unknown stores,
bad keys and batches not reached get 4xx / 503 with a message."""

from __future__ import annotations

import base64

import pytest

from kstate.windowed import MAX_TIME

from .application import KEYS, MINUTE, TODAY
from .server import serving

KEYS_READ = [f"user-{i}" for i in range(KEYS + 2)]


@pytest.fixture
def served(app, tmp_path):
    """``kstate serve`` of ``app`` after batches 0-2, following every 0.1 s; yields a client."""
    for batch in range(3):
        app.run(batch)
    with serving(tmp_path / "changelog", "app", tmp_path / "replica") as client:
        yield client


def _at(app, body):
    """The application's state at the batch an answer names (one partition read: its batch)."""
    batch = body["batch_id"]
    assert batch is not None
    assert all(held >= batch for held in body["partitions"].values())
    return app.state_after(batch)


def test_health_and_stores_say_what_is_served(app, served):
    health = served.get("/health").json()
    assert health["status"] == "serving" and health["application_id"] == "app"
    assert health["batch_id"] == 2 and health["partitions"] == {"0": 2, "1": 2, "2": 2}
    stores = served.get("/stores").json()
    assert stores["batch_id"] == 2
    assert {name: s["kind"] for name, s in stores["stores"].items()} == {
        "counts": "key_value",
        "per_minute": "window",
        "visits": "session",
        "latest": "key_value",
    }
    assert stores["stores"]["counts"]["partitions"] == {"0": 2, "1": 2, "2": 2}


def test_every_read_answers_the_state_of_the_batch_it_names(app, served):
    for key in KEYS_READ:
        body = served.get("/stores/counts/get", params={"key": key}).json()
        assert list(body["partitions"]) == [str(app.partition_of(key))]
        assert body["key"] == key and body["value"] == _at(app, body).counts.get(key)
    body = served.post("/stores/counts/get_many", json=KEYS_READ).json()
    state = _at(app, body)
    assert body["value"] == [state.counts.get(k) for k in KEYS_READ]
    assert served.post("/stores/counts/get_many", json=[]).json()["value"] == []

    body = served.get("/stores/counts/all", params={"limit": 5}).json()
    state = _at(app, body)
    assert [(e["key"], e["value"]) for e in body["value"]] == sorted(state.counts.items())[:5]
    body = served.get("/stores/counts/range", params={"from": "user-1", "to": "user-2"}).json()
    state = _at(app, body)
    expected = sorted((k, v) for k, v in state.counts.items() if "user-1" <= k <= "user-2")
    assert [(e["key"], e["value"]) for e in body["value"]] == expected

    key = min(k for k, _ in app.state_after(2).windows)
    body = served.get(
        "/stores/per_minute/fetch", params={"key": key, "time_from": TODAY, "time_to": TODAY + 100 * MINUTE}
    ).json()
    state = _at(app, body)
    windows = sorted((start, n) for (k, start), n in state.windows.items() if k == key)
    assert [(e["key"], e["value"]) for e in body["value"]] == windows
    one = served.get("/stores/per_minute/fetch", params={"key": key, "time_from": windows[0][0]}).json()
    assert one["value"] == _at(app, one).windows[(key, windows[0][0])]
    body = served.get(
        "/stores/per_minute/fetch_all", params={"time_from": TODAY, "time_to": TODAY + 100 * MINUTE, "limit": 7}
    ).json()
    state = _at(app, body)
    everything = sorted(((start, k.encode()), n) for (k, start), n in state.windows.items())
    assert [(e["key"]["start"], e["key"]["key"].encode(), e["value"]) for e in body["value"]] == [
        (start, k, n) for (start, k), n in everything[:7]
    ]
    body = served.get(
        "/stores/visits/sessions",
        params={"key": key, "earliest_session_end_time": 0, "latest_session_start_time": MAX_TIME},
    ).json()
    state = _at(app, body)
    assert [(e["key"]["start"], e["value"]) for e in body["value"]] == sorted(
        (ts, 1) for k, ts in state.sessions if k == key
    )


def test_at_least_batch_waits_for_the_batch_the_application_publishes(app, served):
    key = "user-5"
    for batch in range(3, 6):
        app.run(batch)
        body = served.get("/stores/counts/get", params={"key": key, "at_least_batch": batch, "timeout": 10}).json()
        assert body["batch_id"] >= batch
        assert body["value"] == app.state_after(body["batch_id"]).counts.get(key)
    late = served.get("/stores/counts/get", params={"key": key, "at_least_batch": 99, "timeout": 0.3})
    assert late.status_code == 503 and "batch 99" in late.json()["error"]


def test_bad_requests_get_4xx_with_a_message(served):
    unknown = served.get("/stores/nope/get", params={"key": "a"})
    assert unknown.status_code == 404 and "no store named 'nope'" in unknown.json()["error"]
    assert "counts" in unknown.json()["error"]
    wrong_kind = served.get("/stores/per_minute/get", params={"key": "a"})
    assert wrong_kind.status_code == 400 and "window store" in wrong_kind.json()["error"]
    missing = served.get("/stores/counts/get")
    assert missing.status_code == 400 and "'key' is missing" in missing.json()["error"]
    bad_time = served.get("/stores/per_minute/fetch", params={"key": "a", "time_from": "soon"})
    assert bad_time.status_code == 400 and "time_from must be an integer" in bad_time.json()["error"]
    bad_body = served.post("/stores/counts/get_many", content=b"{not json")
    assert bad_body.status_code == 400 and "not JSON" in bad_body.json()["error"]
    bad_key = served.post("/stores/counts/get_many", json=[1, 2])
    assert bad_key.status_code == 400 and "error" in bad_key.json()
    bad_limit = served.get("/stores/counts/all", params={"limit": -1})
    assert bad_limit.status_code == 400 and "limit" in bad_limit.json()["error"]
    no_variable = served.get("/variables/nope", params={"key": '"a"'})
    assert no_variable.status_code == 404 and "no state variable 'nope'" in no_variable.json()["error"]


def test_bytes_are_base64_text():
    from kstate.spark.serving.http_api import to_json

    assert to_json({"k": b"\x00\xff"}) == [{"key": "k", "value": base64.b64encode(b"\x00\xff").decode()}]
