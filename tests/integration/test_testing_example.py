"""The example test of docs/how-to/testing.md, run as part of the suite (tests/unit/test_docs_examples.py keeps
the page's copy equal to this file). ``redis_url`` is the suite's fixture; the page shows one of your own."""

import pytest
from pydantic import BaseModel

import tierpool
import tierpool.testing


class Dispute(BaseModel):
    ticket: int


class Verdict(BaseModel):
    refund: bool


app = tierpool.App()


@app.task(tier="p0", timeout="30s")
async def resolve(task: tierpool.Task, inp: Dispute) -> Verdict:
    await task.progress({"looking_at": inp.ticket})
    return Verdict(refund=inp.ticket % 2 == 0)


async def test_resolve_eagerly() -> None:
    recorder = tierpool.testing.Recorder()
    verdict = await tierpool.testing.run(resolve, Dispute(ticket=2), recorder=recorder)
    assert verdict == Verdict(refund=True)
    assert recorder.events == [{"looking_at": 2}]


async def test_bad_input_is_refused_as_submit_refuses_it() -> None:
    with pytest.raises(tierpool.InvalidInput, match="ticket"):
        await tierpool.testing.run(resolve, {"ticket": "two"})


async def test_resolve_on_a_real_worker(redis_url: str) -> None:
    async with tierpool.testing.worker(app, redis_url) as client:
        handle = await client.submit(resolve, Dispute(ticket=3))
        assert await handle.result(timeout=10) == Verdict(refund=False)
