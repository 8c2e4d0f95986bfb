"""URLs: the admin (its login also guards the jobs dashboard) and the shop's sign-up."""

from django.contrib import admin
from django.urls import path
from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("signup/", views.signup),
]
