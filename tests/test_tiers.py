"""The tiers' markers (tests/conftest.py): in whatever this run selected, every test whose
fixtures include the session's Spark or a running Airflow carries that tier's marker. Under
``-m "not spark"`` (``make test-fast``) that means none of them was selected: the markers were
added before ``-m`` deselected."""

from __future__ import annotations

from tests.conftest import TIER_FIXTURES


def test_every_selected_test_asking_for_a_tiers_fixture_has_its_marker(request):
    items = request.session.items
    assert request.node in items
    unmarked = [
        (item.nodeid, marker)
        for item in items
        for fixture, marker in TIER_FIXTURES.items()
        if fixture in getattr(item, "fixturenames", ()) and not item.get_closest_marker(marker)
    ]
    assert unmarked == []
    excluded = request.config.getoption("markexpr")
    if "not spark" in excluded:
        assert not [item.nodeid for item in items if item.get_closest_marker("spark")]
