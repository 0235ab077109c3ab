//! Process facts from procfs: a worker's state (a stopped worker is
//! visible at once, long before any timeout) and the processes an agent
//! started, found by the marker in their environment.

use std::path::Path;

/// The state letter of `/proc/PID/stat` as a word; `None` if the process
/// is gone.
pub fn state(pid: i32) -> Option<&'static str> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything.
    let after = &stat[stat.rfind(')')? + 1..];
    let letter = after.split_whitespace().next()?;
    Some(match letter {
        "R" => "running",
        "S" => "sleeping",
        "D" => "disk_sleep",
        "T" => "stopped",
        "t" => "tracing_stop",
        "Z" => "zombie",
        "X" | "x" => "dead",
        _ => "unknown",
    })
}

/// Pids of live processes whose environment holds `NAME=value`.
pub fn with_env(name: &str, value: &str) -> Vec<i32> {
    let wanted = format!("{name}={value}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| environ_has(&Path::new("/proc").join(pid.to_string()), &wanted))
        .collect();
    pids.sort_unstable();
    pids
}

fn environ_has(dir: &Path, wanted: &str) -> bool {
    std::fs::read(dir.join("environ"))
        .map(|env| env.split(|b| *b == 0).any(|kv| kv == wanted.as_bytes()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_running_and_found_by_its_environment() {
        let me = std::process::id() as i32;
        // The main thread waits for the test threads.
        assert!(matches!(state(me), Some("running" | "sleeping")));
        let mark = format!("procfs-{me}");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("UNICRON_TEST_MARK", &mark)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // spawn returns once the child's exec has replaced its memory, but
        // the kernel fills in the new environment's bounds a moment later:
        // until then /proc/PID/environ reads empty.
        let mut found = Vec::new();
        for _ in 0..100 {
            found = with_env("UNICRON_TEST_MARK", &mark);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(found, vec![pid]);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGSTOP).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(state(pid), Some("stopped"));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(state(pid), None);
    }
}
