"""report.html: one page per results folder, one module per section."""
