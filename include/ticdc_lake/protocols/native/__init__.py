"""The decoders' compiled readers (C extensions); see README.md here. Each is optional: without
it, its protocol module decodes in pure Python."""
