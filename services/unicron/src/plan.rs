//! `unicron plan --input FILE`: solve one allocation problem with the
//! planner's dynamic programme and print the answer as JSON.

use std::path::Path;

use unicron_core::allocation::PlanRequest;

use crate::usage::UsageError;

pub fn run(input: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(input)
        .map_err(|e| UsageError(format!("--input {}: {e}", input.display())))?;
    let request = parse(&text)?;
    let problem = request
        .to_problem()
        .map_err(|e| UsageError(e.to_string()))?;
    println!("{}", serde_json::to_string(&problem.respond())?);
    Ok(())
}

/// JSON with the failing field's path in the error (`jobs[0].min_gpus: ...`).
fn parse(text: &str) -> Result<PlanRequest, UsageError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        // serde_json appends " at line L column C"; keep it, it helps.
        if path == "." {
            UsageError(message)
        } else {
            UsageError(format!("{path}: {message}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_wrong_types_name_the_path() {
        let err =
            parse(r#"{"gpus": 8, "unit": 8, "d_running_s": 1, "jobs": [{"id": "a", "bogus": 1}]}"#)
                .unwrap_err()
                .to_string();
        assert!(
            err.starts_with("jobs[0].bogus: unknown field `bogus`"),
            "{err}"
        );
        let err = parse(r#"{"gpus": "many", "unit": 8, "d_running_s": 1, "jobs": []}"#)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("gpus: invalid type"), "{err}");
    }
}
