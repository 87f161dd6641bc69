"""Task and tier files: untrusted text in, frozen values out, every fault named by file, line, field."""
