import pytest

from tierpool.model.durations import format_duration, ms, ms_ceil, ms_floor, now_ms, parse_duration, parse_duration_flag


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("7m", 420.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("0s", 0.0),
        (12, 12.0),
        (0.5, 0.5),
        ("2m30s", 150.0),
    ],
)
def test_parse(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5", "m", "5 minutes", "-1s", "5d", "1m-", True, None, -3, "1.s"])
def test_parse_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (30, "30s"), (420, "7m"), (5400, "1h30m"), (0.25, "250ms"), (3661, "1h1m1s")]
)
def test_format_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("seconds", "nearest", "floor", "ceil"),
    [
        (0.0, 0, 0, 0),
        (1.5, 1500, 1500, 1500),
        (0.0014, 1, 1, 2),
        (0.0016, 2, 1, 2),
        (30.0, 30_000, 30_000, 30_000),
    ],
)
def test_seconds_to_milliseconds(seconds: float, nearest: int, floor: int, ceil: int) -> None:
    assert (ms(seconds), ms_floor(seconds), ms_ceil(seconds)) == (nearest, floor, ceil)


def test_now_ms_reads_the_injected_clock() -> None:
    assert now_ms(lambda: 1_700_000_000.1234) == 1_700_000_000_123


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 30.0), ("2.5", 2.5), (" 7 ", 7.0), ("30s", 30.0), ("5m", 300.0), ("250ms", 0.25)]
)
def test_a_flag_takes_bare_seconds_or_a_duration(text: str, seconds: float) -> None:
    assert parse_duration_flag(text) == seconds


@pytest.mark.parametrize("bad", ["", "-5", "inf", "nan", "1e3", "5 s", "5d", "soon"])
def test_a_flag_refuses_what_is_not_a_duration(bad: str) -> None:
    with pytest.raises(ValueError, match="30 \\(seconds\\), 30s, 5m"):
        parse_duration_flag(bad)


def test_a_pool_file_still_needs_the_unit() -> None:
    with pytest.raises(ValueError):
        parse_duration("30")
