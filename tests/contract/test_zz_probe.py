from typing import Any
from conveyor import Conveyor, chain


def test_nul_result(app: Conveyor) -> None:
    @app.task(name="mk")
    def mk() -> Any:
        return {"k\x00": "a\x00b", "u": "\ud7ff\ue000\U0010ffff"}

    @app.task(name="show")
    def show(x: Any) -> Any:
        return x

    f = chain(mk.s(), show.s()).enqueue()
    h = mk.enqueue()
    app.worker().run_until_idle()
    assert app.get_job(h.id).result == {"k\x00": "a\x00b", "u": "\ud7ff\ue000\U0010ffff"}, app.get_job(h.id).errors
    assert f.result() == {"k\x00": "a\x00b", "u": "\ud7ff\ue000\U0010ffff"}
