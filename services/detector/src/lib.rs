//! unicron-detector: reads `unicron.telemetry`, `unicron.logs`,
//! `unicron.agent` (and configured external formats), runs the detection
//! logic of `unicron-core`, and publishes `unicron.failures`.
//!
//! Thin by design (DESIGN §2): Kafka wiring only; classification,
//! correlation and timers live in `unicron-core`. The service loop arrives
//! with the detector issue.
