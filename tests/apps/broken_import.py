"""An app module whose import fails, for the CLI's app-load error."""

raise RuntimeError("this module fails on import")
