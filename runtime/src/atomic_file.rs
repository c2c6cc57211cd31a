//! Replacing a file so that a crash leaves either the old or the new contents, never a
//! torn mix: write `{name}.tmp` beside it, fsync it, rename it over the file, fsync the
//! directory (without which the rename itself may not survive a power cut).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where [`replace`] writes before renaming: the file's name with `.tmp` appended, so a
/// leftover is recognisable by its suffix.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Atomically and durably replaces `path` with `contents`.
pub fn replace(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(path);
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_an_existing_file_when_replaced_then_it_holds_the_new_contents_and_no_temp() {
        let dir = std::env::temp_dir().join(format!("idem-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("state.json");
        replace(&path, b"old").expect("first");
        replace(&path, b"new").expect("second");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        assert!(!temp_path(&path).exists());
        assert_eq!(temp_path(&path), dir.join("state.json.tmp"));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
