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
