"""The example app: a sign-up that sends its welcome mail as a background job."""
