"""The local OpenReview-compatible server, exercised through the real openreview-py clients."""

from __future__ import annotations

import math

import openreview
import pytest
import requests
from openreview.api import OpenReviewClient

from tasks.testing.openreview_server import Fault, serve_venues
from tasks.testing.synthetic import make_venue

V2_VENUE, V1_VENUE = "GREBench.cc/2025/Demo", "ICLR.cc/2023/Conference"
PAGE = 5


@pytest.fixture(scope="module")
def venues():
    return make_venue(V2_VENUE), make_venue(V1_VENUE, seed=3, pdfs=False)


@pytest.fixture
def server(venues):
    with serve_venues(venues, page_limit=PAGE) as srv:
        yield srv


def quiet(client):
    """The clients retry 429/5xx themselves with multi-second back-off; tests want the raw answer."""
    client.session.mount("http://", requests.adapters.HTTPAdapter(max_retries=0))
    return client


def test_v2_submissions_with_replies_paginate(server, venues):
    client = OpenReviewClient(baseurl=server.v2_url)
    notes = client.get_all_notes(invitation=f"{V2_VENUE}/-/Submission", details="replies")
    assert len(notes) == 12 and {n.id for n in notes} == {p.paper_id for p in venues[0].papers}
    # the page limit caps each answer; the client's `after` cursor stops at an empty page
    assert server.count(2) == math.ceil(12 / PAGE) + 1
    first = next(n for n in notes if n.number == 1)
    kinds = {inv.rsplit("/-/", 1)[1] for r in first.details["replies"] for inv in r["invitations"][:1]}
    assert {"Official_Review", "Official_Comment", "Meta_Review", "Decision"} <= kinds
    assert first.content["title"]["value"] == venues[0].papers[0].title
    assert first.content["venueid"]["value"].startswith(V2_VENUE)
    review = next(r for r in first.details["replies"] if r["invitations"][0].endswith("Official_Review"))
    assert review["content"]["rating"]["value"].split(":")[0].isdigit()


def test_v2_direct_replies_leave_out_comments_to_reviews(server):
    client = OpenReviewClient(baseurl=server.v2_url)
    page, count = client.get_notes(invitation=f"{V2_VENUE}/-/Submission", details="directReplies", with_count=True)
    assert count == 12 and len(page) == PAGE
    for note in page:
        assert all(r["replyto"] == note.id for r in note.details["directReplies"])
    offset_page = client.get_notes(invitation=f"{V2_VENUE}/-/Submission", offset=PAGE, limit=PAGE, sort="number:asc")
    assert [n.number for n in offset_page] == list(range(PAGE + 1, 2 * PAGE + 1))


def test_v2_group_reviews_pdf_and_lookups(server, venues):
    client = OpenReviewClient(baseurl=server.v2_url)
    group = client.get_group(V2_VENUE)
    assert group.content["submission_id"]["value"] == f"{V2_VENUE}/-/Submission"
    paper = venues[0].papers[0]
    reviews = client.get_all_notes(invitation=f"{V2_VENUE}/Submission1/-/Official_Review")
    assert {r.id for r in reviews} == {r.review_id for r in paper.reviews}
    assert client.get_note(paper.reviews[0].review_id).forum == paper.paper_id
    assert client.get_pdf(paper.paper_id) == paper.pdf
    withdrawn = next(p for p in venues[0].papers if p.status == "withdrawn")
    [note] = client.get_notes(id=withdrawn.paper_id)
    assert note.content["venueid"]["value"] == f"{V2_VENUE}/Withdrawn_Submission"
    with pytest.raises(openreview.OpenReviewException):
        client.get_group("Nobody/2025/Conference")


def test_v1_shape(server, venues):
    client = openreview.Client(baseurl=server.v1_url)
    active = client.get_all_notes(invitation=f"{V1_VENUE}/-/Blind_Submission", details="directReplies")
    withdrawn = client.get_all_notes(invitation=f"{V1_VENUE}/-/Withdrawn_Submission")
    desk = client.get_all_notes(invitation=f"{V1_VENUE}/-/Desk_Rejected_Submission")
    assert len(active) + len(withdrawn) + len(desk) == 12 and len(withdrawn) == 1 and len(desk) == 1
    review = next(r for n in active for r in n.details["directReplies"] if r["invitation"].endswith("Official_Review"))
    assert {"summary_of_the_paper", "strength_and_weaknesses", "recommendation", "confidence"} <= set(review["content"])
    assert isinstance(review["content"]["recommendation"], str)
    all_reviews = client.get_all_notes(invitation=f"{V1_VENUE}/Paper.*/-/Official_Review")
    assert len(all_reviews) == venues[1].n_reviews


def test_non_utf8_bytes_arrive_as_replacement_characters(server, venues):
    client = OpenReviewClient(baseurl=server.v2_url)
    note = client.get_note(venues[0].bad_cases["non_utf8"])
    assert "\ufffd" in note.content["summary"]["value"]


def test_429_with_retry_after_is_honoured_by_the_client(server):
    server.inject(Fault("429", times=1, retry_after=1))
    client = OpenReviewClient(baseurl=server.v2_url)
    assert len(client.get_notes(invitation=f"{V2_VENUE}/-/Submission")) == PAGE
    first, second = server.log[-2:]
    assert (first.status, second.status) == (429, 200) and second.at - first.at >= 1.0


def test_faults_seen_raw(server):
    client = quiet(OpenReviewClient(baseurl=server.v2_url))
    server.inject(Fault("429", retry_after=7), Fault("5xx", status=502), Fault("malformed"), Fault("bad_shape"))
    with pytest.raises(openreview.OpenReviewException) as error:
        client.get_notes(invitation=f"{V2_VENUE}/-/Submission")
    assert error.value.args[0]["status"] == 429
    response = requests.get(f"{server.v2_url}/notes", params={"invitation": f"{V2_VENUE}/-/Submission"})
    assert response.status_code == 502
    with pytest.raises(requests.exceptions.JSONDecodeError):
        client.get_notes(invitation=f"{V2_VENUE}/-/Submission")
    with pytest.raises(KeyError):
        client.get_notes(invitation=f"{V2_VENUE}/-/Submission")
    assert len(client.get_notes(invitation=f"{V2_VENUE}/-/Submission")) == PAGE   # faults used up
    assert server.count(2) == 5


def test_slow_answer_beyond_a_client_timeout(server):
    server.inject(Fault("slow", delay=1.5, when=lambda params: params.get("offset") == "5"))
    with pytest.raises(requests.Timeout):
        requests.get(f"{server.v2_url}/notes", params={"invitation": f"{V2_VENUE}/-/Submission", "offset": 5},
                     timeout=0.3)
    response = requests.get(f"{server.v2_url}/notes", params={"invitation": f"{V2_VENUE}/-/Submission", "offset": 5})
    assert len(response.json()["notes"]) == PAGE


def test_login_and_large_pdf_headers(server, venues):
    client = OpenReviewClient(baseurl=server.v2_url, username="guest@example.org", password="secret")
    assert client.token in server.tokens and server.logins == 1   # any login works on the lenient server
    large = venues[0].bad_cases["large_pdf"]
    with requests.get(f"{server.v2_url}/pdf", params={"id": large}, stream=True) as response:
        assert int(response.headers["Content-Length"]) > 1 << 30
        assert next(response.iter_content(8)) == b"%PDF-1.7"
