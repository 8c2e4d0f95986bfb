"""The workflow page (issue 16): ``/workflows/{id}`` lists every node level by level with its
state and parents; a job of a workflow links to it; hostile names, arguments and forged
workflow ids are shown as text and addressed as one path segment."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.testclient import TestClient

from conveyor import Conveyor, chord, group
from conveyor.dashboard import DashboardConfig, create_app
from tests.support.hostile import HOSTILE_TEXT, store_unvalidated

from .conftest import AUTH, PASSWORD, TOKEN, USER
from .test_hostile_data import attr_urls


def _flow(app: Conveyor, name: str = "nightly") -> Any:
    add, boom = app.tasks["add"], app.tasks["boom"]
    flow = chord(
        group([add.partial(1, 2), boom.partial(), add.partial(3, 4)]), add.partial(1)
    ).enqueue(name=name)
    return flow


def test_nodes_by_level_with_states(api: TestClient, dash_app: Conveyor) -> None:
    flow = _flow(dash_app)
    page = api.get(f"/workflows/{flow.id}")
    assert page.status_code == 200
    assert page.text.count('class="workflow-node" data-state="pending"') == 3
    assert page.text.count('data-state="waiting"') == 1 and 'data-level="1"' in page.text
    dash_app.worker().run_until_idle()
    page = api.get(f"/workflows/{flow.id}").text
    assert page.count('data-state="completed"') == 2 and page.count('data-state="dead_letter"') == 1
    assert 'data-state="cancelled"' in page and "failed" in page  # the callback names it
    callback = flow.ids[-1]
    assert f"/jobs/{callback}" in page and "nightly" in page
    job_page = api.get(f"/jobs/{callback}").text
    assert f'id="job-workflow" href="/workflows/{flow.id}"' in job_page


def test_links_carry_the_root_path(dash_app: Conveyor) -> None:
    flow = _flow(dash_app)
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD)
    app = create_app(dash_app, config)
    with TestClient(app, base_url="http://127.0.0.1", root_path="/ops") as client:
        client.headers.update(AUTH)
        page = client.get(f"/workflows/{flow.id}").text
        assert f'href="/ops/jobs/{flow.ids[0]}"' in page
        assert f'href="/ops/workflows/{flow.id}"' in client.get(f"/jobs/{flow.ids[-1]}").text


def test_unknown_workflow_is_404(api: TestClient) -> None:
    assert api.get("/workflows/nope").status_code == 404
    assert api.get("/workflows/..%2F..%2Fjobs").status_code == 404


def test_hostile_names_arguments_and_forged_ids(api: TestClient, dash_app: Conveyor) -> None:
    add = dash_app.tasks["add"]
    for key, text in HOSTILE_TEXT.items():
        flow = group([add.partial(text, text)]).enqueue(name=text[:200])
        page = api.get(f"/workflows/{quote(flow.id, safe='')}")
        assert page.status_code == 200, key
        assert "<script>" not in page.text and "<b>badly" not in page.text
        # a job whose metadata names a hostile workflow id: the link is one escaped segment
        forged = store_unvalidated(
            dash_app, f"forged-{key}", "add", 1, 2, metadata={"workflow": {"id": text[:200]}}
        )
        job_page = api.get(f"/jobs/{quote(forged, safe='')}")
        assert job_page.status_code == 200, key
        for url in attr_urls(job_page.text):
            if "/workflows/" in url:
                assert url == "/workflows/" + quote(text[:200], safe=""), (key, url)
