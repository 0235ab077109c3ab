//! The kernel's log: Xid, ECC and link errors are printed by the kernel,
//! not by the workers. Follows `/dev/kmsg` (one record per read) or a
//! plain file (appended lines), from its end, and publishes each line with
//! source `kernel`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::report::Reporter;

const POLL: Duration = Duration::from_millis(100);

/// Follows `path` on a blocking thread until the process ends.
pub fn spawn(path: PathBuf, reporter: Arc<Reporter>) {
    std::thread::Builder::new()
        .name("kernel-log".into())
        .spawn(move || {
            let result = if path == Path::new("/dev/kmsg") {
                follow_kmsg(&path, &reporter)
            } else {
                follow_file(&path, &reporter)
            };
            if let Err(error) = result {
                tracing::error!(path = %path.display(), %error, "kernel log not followed");
            }
        })
        .expect("spawning a thread");
}

fn publish(reporter: &Reporter, line: &str) {
    let line = line.trim_end();
    if !line.is_empty() {
        reporter.log("kernel", None, None, line.to_string(), BTreeMap::new());
    }
}

/// `/dev/kmsg`: each read returns one record, `prio,seq,usec,flags;text`.
fn follow_kmsg(path: &Path, reporter: &Reporter) -> std::io::Result<()> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::End(0))?;
    let mut buf = vec![0u8; 8192];
    loop {
        match file.read(&mut buf) {
            Ok(0) => std::thread::sleep(POLL),
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                let text = record.split_once(';').map_or(&*record, |(_, t)| t);
                // Continuation lines (" KEY=value") are metadata.
                publish(reporter, text.lines().next().unwrap_or(""));
            }
            // Records overwritten before we read them: go on.
            Err(e) if e.raw_os_error() == Some(32) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A file that grows by lines; truncation or replacement starts it over.
fn follow_file(path: &Path, reporter: &Reporter) -> std::io::Result<()> {
    let mut file = loop {
        match File::open(path) {
            Ok(f) => break f,
            Err(e) if e.kind() == ErrorKind::NotFound => std::thread::sleep(POLL),
            Err(e) => return Err(e),
        }
    };
    let mut position = file.seek(SeekFrom::End(0))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n > 0 && line.ends_with('\n') {
            position += n as u64;
            publish(reporter, &line);
            continue;
        }
        // A partial line: read it again once it is whole.
        if n > 0 {
            reader.seek(SeekFrom::Start(position))?;
        }
        std::thread::sleep(POLL);
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len < position {
            reader = BufReader::new(File::open(path)?);
            position = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::report::Reported;
    use crate::settings::AgentSettings;

    #[tokio::test]
    async fn lines_appended_to_a_file_are_published_as_kernel_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(&path, "old line, before the agent started\n").unwrap();
        let settings = AgentSettings {
            cluster: "c".into(),
            node: "n1".into(),
            ..AgentSettings::default()
        };
        let (reporter, mut queue) = Reporter::new(&settings);
        spawn(path.clone(), reporter);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.";
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        write!(file, "{xid}\npartial").unwrap();
        file.flush().unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), queue.recv())
            .await
            .unwrap()
            .unwrap();
        let Reported::Log(record) = got else {
            panic!("not a log record: {got:?}")
        };
        assert_eq!(
            (record.source.as_str(), record.line.as_str()),
            ("kernel", xid)
        );
        assert_eq!(record.node, "n1");
        // The partial line waits until it is whole.
        writeln!(file, " line").unwrap();
        let Some(Reported::Log(next)) = tokio::time::timeout(Duration::from_secs(5), queue.recv())
            .await
            .unwrap()
        else {
            panic!("no second line")
        };
        assert_eq!(next.line, "partial line");
    }
}
