//! `pcache-mount`: the same as `pcache mount`, as a binary of this crate so
//! that its integration tests can run (and kill) the daemon.

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "pcache-mount", version, about = "Serve a directory through pcache with FUSE")]
struct Cli {
    #[command(flatten)]
    args: pcache_fuse::MountArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match pcache_fuse::run(&cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
