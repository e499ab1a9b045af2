"""Small helpers every room may use: where the package's files live, and the redactor of secrets."""
