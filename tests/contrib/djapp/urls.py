"""URLs of the test Django project: one plain view, to tell Django's answers apart."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path


def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello from django")


urlpatterns = [path("hello/", hello)]
