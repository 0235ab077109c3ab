//! Cross-service tests live in tests/tests/.
