"""mpiop.kube.client.request_url: the query encoded once by the stdlib, the URL taken as encoded by aiohttp."""

from __future__ import annotations

from mpiop.kube.client import request_url


def test_query_values_are_encoded_once() -> None:
    url = request_url("https://10.0.0.1:6443", "/api/v1/namespaces/ns/pods",
               (("labelSelector", "training.kubeflow.org/job-name in (pi,pi-2)"), ("limit", "500")))
    assert str(url) == ("https://10.0.0.1:6443/api/v1/namespaces/ns/pods"
                        "?labelSelector=training.kubeflow.org%2Fjob-name+in+%28pi%2Cpi-2%29&limit=500")
    assert url.query["labelSelector"] == "training.kubeflow.org/job-name in (pi,pi-2)"
    assert url.raw_path == "/api/v1/namespaces/ns/pods"


def test_no_query_no_question_mark_and_one_url_per_request_shape() -> None:
    assert str(request_url("https://h", "/api/v1/pods", ())) == "https://h/api/v1/pods"
    query = (("fieldManager", "mpiop"),)
    assert request_url("https://h", "/x", query) is request_url("https://h", "/x", query)
