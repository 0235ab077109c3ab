//! Where the archive's files are: one directory per topic, files named by
//! partition and offset range; listing them and clearing unfinished ones.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ArchiveError, file_error};

const AVRO_SUFFIX: &str = ".avro";
const PART_SUFFIX: &str = ".avro.part";

/// A closed archive file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ArchiveFile {
    pub topic: String,
    pub partition: i32,
    /// Offset of its first record.
    pub first: i64,
    /// Offset of its last record.
    pub last: i64,
    pub path: PathBuf,
}

/// `<partition:05>-<first:020>-<last:020>.avro`.
pub fn file_name(partition: i32, first: i64, last: i64) -> String {
    format!("{partition:05}-{first:020}-{last:020}{AVRO_SUFFIX}")
}

pub(super) fn part_name(partition: i32, first: i64) -> String {
    format!("{partition:05}-{first:020}{PART_SUFFIX}")
}

/// (partition, first, last) of a closed file's name.
fn parse_file_name(name: &str) -> Option<(i32, i64, i64)> {
    let stem = name.strip_suffix(AVRO_SUFFIX)?;
    let mut parts = stem.split('-');
    let mut number = |width: usize| {
        let text = parts.next()?;
        (text.len() >= width && text.bytes().all(|b| b.is_ascii_digit())).then_some(text)
    };
    let partition = number(5)?.parse().ok()?;
    let first = number(20)?.parse().ok()?;
    let last = number(20)?.parse().ok()?;
    (parts.next().is_none() && first <= last).then_some((partition, first, last))
}

/// A topic name is used as a directory name: only Kafka's legal characters,
/// and not `.` or `..`.
pub(super) fn check_topic(topic: &str) -> Result<(), ArchiveError> {
    let legal = !topic.is_empty()
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if legal {
        Ok(())
    } else {
        Err(ArchiveError::TopicName(topic.to_string()))
    }
}

/// Every closed file under `dir`, sorted by topic, partition and first
/// offset. `.part` files (being written) and other files are skipped.
pub fn list(dir: impl AsRef<Path>) -> Result<Vec<ArchiveFile>, ArchiveError> {
    let dir = dir.as_ref();
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| file_error(dir, e))? {
        let entry = entry.map_err(|e| file_error(dir, e))?;
        let is_dir = entry
            .file_type()
            .map_err(|e| file_error(&entry.path(), e))?
            .is_dir();
        if let (true, Some(topic)) = (is_dir, entry.file_name().to_str()) {
            list_topic_dir(&entry.path(), topic, &mut out)?;
        }
    }
    out.sort();
    Ok(out)
}

/// The closed files of `topic` under `dir`, sorted by partition and first
/// offset; none if the topic was never archived there.
pub fn list_topic(dir: impl AsRef<Path>, topic: &str) -> Result<Vec<ArchiveFile>, ArchiveError> {
    let dir = dir.as_ref();
    check_topic(topic)?;
    fs::metadata(dir).map_err(|e| file_error(dir, e))?;
    let topic_dir = dir.join(topic);
    let mut out = Vec::new();
    if topic_dir.is_dir() {
        list_topic_dir(&topic_dir, topic, &mut out)?;
    }
    out.sort();
    Ok(out)
}

fn list_topic_dir(
    topic_dir: &Path,
    topic: &str,
    out: &mut Vec<ArchiveFile>,
) -> Result<(), ArchiveError> {
    for entry in fs::read_dir(topic_dir).map_err(|e| file_error(topic_dir, e))? {
        let entry = entry.map_err(|e| file_error(topic_dir, e))?;
        let name = entry.file_name();
        if let Some((partition, first, last)) = name.to_str().and_then(parse_file_name) {
            out.push(ArchiveFile {
                topic: topic.to_string(),
                partition,
                first,
                last,
                path: entry.path(),
            });
        }
    }
    Ok(())
}

/// Deletes every `.part` file under `dir` (files a stopped writer left
/// unfinished; their records were never committed, so the archiver reads
/// them again) and returns their paths.
pub fn remove_partial(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, ArchiveError> {
    let dir = dir.as_ref();
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| file_error(dir, e))? {
        let topic_dir = entry.map_err(|e| file_error(dir, e))?.path();
        if !topic_dir.is_dir() {
            continue;
        }
        for file in fs::read_dir(&topic_dir).map_err(|e| file_error(&topic_dir, e))? {
            let path = file.map_err(|e| file_error(&topic_dir, e))?.path();
            let partial = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(PART_SUFFIX));
            if partial {
                fs::remove_file(&path).map_err(|e| file_error(&path, e))?;
                removed.push(path);
            }
        }
    }
    removed.sort();
    Ok(removed)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_part_files_do_not_parse() {
        let name = file_name(3, 0, 41);
        assert_eq!(name, "00003-00000000000000000000-00000000000000000041.avro");
        assert_eq!(parse_file_name(&name), Some((3, 0, 41)));
        assert_eq!(parse_file_name(&part_name(3, 0)), None);
        assert_eq!(
            parse_file_name("00003-00000000000000000041-00000000000000000000.avro"),
            None
        );
        assert_eq!(parse_file_name("3-0-41.avro"), None);
        assert_eq!(parse_file_name("notes.txt"), None);
    }

    #[test]
    fn topic_names_are_checked() {
        check_topic("unicron.command-results").unwrap();
        for bad in ["", ".", "..", "a/b", "a b", "../x"] {
            assert!(check_topic(bad).is_err(), "{bad}");
        }
    }
}
