//! `pcache`: the command line of the userspace page cache.
//!
//! ```text
//! pcache bench                      # the main job (the registry's experiments marked so)
//! pcache bench --list               # the experiments
//! pcache bench NAME [--mem SIZE] [--variants A,B] [--runs N] [--quick] [--json FILE] [--dir PATH]
//!                   [--set TUNABLE=VALUE]... [--param NAME=VALUE]... [--plot DIR] [--no-kernel]
//! pcache bench NAME --help          # its parameters and variants
//! pcache replay TRACE... / pcache sweep ARGS... / pcache mount BACKING_DIR MOUNTPOINT --mem SIZE
//! pcache tunables                   # what --set takes
//! ```
//!
//! The experiments come from `pcache_workloads::registry`: this file names
//! none of them. It parses options and prints; running, the main job's
//! JSON and replay's baselines are the workloads crate's.
//!
//! A user's mistake is one line on stderr, `error: ...`, and exit 1 (2 for
//! the usage errors clap finds), checked before anything long runs.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Args, Command, CommandFactory, FromArgMatches, Parser, Subcommand};
use pcache_workloads::experiment::{self, keyed_json, parse_set, ExpOpts, Experiment};
use pcache_workloads::registry;
use pcache_workloads::render::parse_size;
use pcache_workloads::verdict;

#[derive(Parser, Debug)]
#[command(name = "pcache", version, about = "pcache: the Linux page cache, in userspace")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run benchmarks and experiments. Without an experiment, runs the main
    /// job (`--list` marks its experiments).
    Bench(BenchCmd),
    /// Serve BACKING_DIR at MOUNTPOINT through pcache with FUSE, until
    /// unmounted (fusermount3 -u) or signalled (Ctrl-C, SIGTERM); dirty
    /// pages are written back before it exits. `.pcache/vmstat` and the
    /// tunables are at the mount root.
    Mount(pcache_fuse::MountArgs),
    /// Replay block traces (LIRS, libCacheSim csv or oracleGeneral)
    /// through pcache and report miss ratios per cache size and variant.
    Replay(ReplayCmd),
    /// Replay sweeps (traces x sizes x variants) on local cores or on Ray:
    /// runs the Python driver `python3 -m pcache.sweep` (the pcache Python
    /// package, `pip install ./crates/python`; $PCACHE_PYTHON picks the
    /// interpreter). `pcache sweep --help` lists its options.
    #[command(disable_help_flag = true)]
    Sweep {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<std::ffi::OsString>,
    },
    /// List the tunables `--set NAME=VALUE` takes (bench and mount), with
    /// their defaults, and the run-time ones a mount also shows under
    /// `.pcache/`.
    Tunables,
    /// The kernel column's child process (internal): joins the memory
    /// cgroup CGROUP and runs EXPERIMENT's workload through the kernel's
    /// page cache with PARAMS (JSON), printing JSON.
    #[command(name = "__kernel-worker", hide = true)]
    KernelWorker { experiment: String, cgroup: PathBuf, params: String },
}

#[derive(Args, Debug)]
struct ReplayCmd {
    /// Trace files (gzip is detected).
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,

    /// Trace format: lirs, csv or oracleGeneral [default: from the name:
    /// .csv is csv, a name containing oracleGeneral is oracleGeneral,
    /// anything else lirs].
    #[arg(long, value_parser = parse_replay_format)]
    format: Option<pcache_workloads::replay::Format>,

    /// One cache size in pages, at least 16 (instead of --sizes).
    #[arg(long, value_name = "N", value_parser = parse_replay_pages, conflicts_with_all = ["mem", "sizes"])]
    pages: Option<u64>,

    /// One cache size in bytes, e.g. 4M, at least 64K (instead of --sizes).
    #[arg(long, value_name = "SIZE", value_parser = parse_replay_mem, conflicts_with = "sizes")]
    mem: Option<u64>,

    /// Cache sizes in percent of the trace's distinct pages.
    #[arg(long, value_name = "PCTS", value_delimiter = ',', default_value = "10,20,40,80")]
    sizes: Vec<f64>,

    /// Variants, comma-separated (listed below) [default: those marked *].
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    variants: Vec<String>,

    /// Readahead: only "off" (replays read one page per request).
    #[arg(long, value_name = "off", default_value = "off", value_parser = ["off"])]
    readahead: String,

    /// Write the results as JSON to FILE ("-" for stdout; the tables then
    /// go to stderr). One trace: its object; several: an array.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Write a miss-ratio curve per trace (SVG) into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,

    /// Threads replaying interleaved slices of the trace through the same
    /// cache (thread i reads accesses i, i+N, ...). With more than one the
    /// miss counts depend on the interleaving: not deterministic.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = pcache_fuse::parse_count)]
    threads: usize,

    /// Add the kernel column: the same trace through the host kernel's page
    /// cache, in a memory cgroup of the same size (needs root and a memory
    /// cgroup; skipped with the reason otherwise).
    #[arg(long, overrides_with = "no_kernel")]
    kernel: bool,

    /// No kernel column (the default).
    #[arg(long, overrides_with = "kernel")]
    no_kernel: bool,

    /// Directory for the kernel column's files (on a disk, not tmpfs)
    /// [default: the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    kernel_dir: Option<PathBuf>,

    /// Also write one Markdown table of every trace, size and column to
    /// FILE (as in BENCHMARKS.md).
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,

    /// Merge another simulator's results (JSON in replay's schema, e.g.
    /// from scripts/libcachesim_replay.py) as extra columns, matched by
    /// trace name and cache size. Repeatable.
    #[arg(long, value_name = "FILE.json")]
    baseline: Vec<PathBuf>,

    /// Size pcache's arena so that its usable pages equal the nominal
    /// cache size (frames = pages + the free reserve its watermarks keep),
    /// to compare at equal capacity with the kernel column and the
    /// baselines, which keep no reserve. Default: frames = nominal pages.
    #[arg(long)]
    usable_equals_nominal: bool,
}

fn parse_replay_format(s: &str) -> Result<pcache_workloads::replay::Format, String> {
    s.parse()
}

/// The replay's caches are never smaller than the engine's smallest: a
/// size below it is refused here rather than raised to it unsaid.
fn parse_replay_pages(s: &str) -> Result<u64, String> {
    let min = pcache_workloads::replay::MIN_CACHE_PAGES;
    match s.trim().parse::<u64>() {
        Ok(n) if n < min => Err(format!("{n} pages is too small: the smallest cache is {min} pages")),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_replay_mem(s: &str) -> Result<u64, String> {
    use pcache_workloads::replay::{MIN_CACHE_PAGES, PAGE};
    let bytes = parse_size(s)?;
    let min = MIN_CACHE_PAGES * PAGE;
    if bytes < min {
        return Err(format!("too small: the smallest cache is {} KiB ({MIN_CACHE_PAGES} pages)", min >> 10));
    }
    Ok(bytes)
}

/// The variants an experiment compares, for its `--help`: the registry's
/// table, so that the list cannot drift from what the code runs.
fn variants_help(presets: &[pcache_workloads::variants::Preset]) -> String {
    let mut help = String::new();
    if !presets.is_empty() {
        help.push_str("Variants (--variants NAME,NAME; * = default):\n");
        for p in presets {
            let line = p.stands_for.split_whitespace().collect::<Vec<_>>().join(" ");
            help.push_str(&format!("  {}{:<22} {line}\n", if p.default { "*" } else { " " }, p.name));
        }
    }
    help
}

/// `pcache replay`'s flags as the registered experiment's options (see
/// `pcache_workloads::replay::Replay`).
fn replay_opts(cmd: &ReplayCmd) -> ExpOpts {
    let list = |xs: &[String]| xs.join(",");
    let paths = |ps: &[PathBuf]| ps.iter().map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>();
    let mut params = vec![("trace".to_string(), list(&paths(&cmd.traces)))];
    if let Some(f) = cmd.format {
        params.push(("format".into(), f.name().into()));
    }
    let sizes: Vec<String> = cmd.sizes.iter().map(f64::to_string).collect();
    params.push(("sizes".into(), list(&sizes)));
    if let Some(n) = cmd.pages {
        params.push(("pages".into(), n.to_string()));
    }
    params.push(("threads".into(), cmd.threads.to_string()));
    if !cmd.baseline.is_empty() {
        params.push(("baseline".into(), list(&paths(&cmd.baseline))));
    }
    if let Some(md) = &cmd.markdown {
        params.push(("markdown".into(), md.to_string_lossy().into_owned()));
    }
    params.push(("usable_equals_nominal".into(), cmd.usable_equals_nominal.to_string()));
    ExpOpts {
        mem_bytes: cmd.mem,
        variants: (!cmd.variants.is_empty()).then(|| cmd.variants.clone()),
        dir: cmd.kernel_dir.clone(),
        plot_dir: cmd.plot.clone(),
        kernel: cmd.kernel && !cmd.no_kernel,
        params,
        ..ExpOpts::default()
    }
}

/// `pcache replay`: the registered experiment, run and printed like
/// `bench`'s.
fn replay(cmd: ReplayCmd) -> Result<(), BoxError> {
    let opts = replay_opts(&cmd);
    let exp = registry::find("replay").ok_or("replay is not registered")?;
    let sink = cmd.json.as_deref().map(JsonSink::open).transpose()?;
    let outcome = experiment::run(exp, &opts)?;
    JsonSink::print_report(&sink, &outcome.report);
    if let Some(sink) = sink {
        sink.write(&format!("{}\n", outcome.json))?;
    }
    Ok(())
}

#[derive(Args, Debug)]
struct BenchCmd {
    /// List the experiments and exit.
    #[arg(long)]
    list: bool,

    #[command(flatten)]
    shared: SharedArgs,
}

/// The options every experiment takes, before or after its name. An
/// experiment's own parameters are `--param NAME=VALUE` (or `--NAME
/// VALUE`), listed by `pcache bench NAME --help`.
#[derive(Args, Debug, Clone, Default)]
struct SharedArgs {
    /// Write the results as JSON to FILE ("-" for stdout; the report then
    /// goes to stderr).
    #[arg(long, value_name = "FILE", global = true)]
    json: Option<PathBuf>,

    /// Reduced sizes, for tests and CI.
    #[arg(long, global = true)]
    quick: bool,

    /// Seed of every random choice [default: 1].
    #[arg(long, value_name = "N", global = true)]
    seed: Option<u64>,

    /// Runs (repetitions) of every measurement [default: the experiment's].
    #[arg(long, value_name = "N", global = true, alias = "rounds", value_parser = pcache_fuse::parse_count)]
    runs: Option<usize>,

    /// Directory to create temporary files in [default: the system's].
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<PathBuf>,

    /// Draw no progress bars.
    #[arg(long, global = true)]
    no_progress: bool,

    /// Page cache size, e.g. 128M or 1G [default: the experiment's].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, global = true)]
    mem: Option<u64>,

    /// Variants to compare, comma-separated; the first is the baseline
    /// [default: the experiment's].
    #[arg(long, value_name = "NAME,NAME", value_delimiter = ',', global = true)]
    variants: Option<Vec<String>>,

    /// Set a tunable for every variant, by name, after its preset
    /// (repeatable), e.g. --set dirty_ratio=40 --set remark_rule=PrevIndex;
    /// `pcache tunables` lists them.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set, global = true)]
    set: Vec<(String, String)>,

    /// Set one of the experiment's own parameters (repeatable; see
    /// `pcache bench NAME --help`).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_set, global = true)]
    param: Vec<(String, String)>,

    /// Write SVG plots to DIR.
    #[arg(long, value_name = "DIR", global = true)]
    plot: Option<PathBuf>,

    /// Skip the kernel column.
    #[arg(long, global = true)]
    no_kernel: bool,

    /// Write the full report (every table, check and note) to FILE. The
    /// main job always writes one, by default to a new file in the
    /// system's temporary directory, and prints only its verdicts.
    #[arg(long, value_name = "FILE", global = true)]
    report: Option<PathBuf>,
}

impl SharedArgs {
    /// The workloads crate's options, with `params` (from `--param` and
    /// the `--NAME VALUE` spellings) appended.
    fn exp_opts(&self, params: Vec<(String, String)>) -> ExpOpts {
        ExpOpts {
            mem_bytes: self.mem,
            variants: self.variants.clone(),
            runs: self.runs,
            quick: self.quick,
            dir: self.dir.clone(),
            progress: !self.no_progress,
            seed: self.seed.unwrap_or(1),
            plot_dir: self.plot.clone(),
            set: self.set.clone(),
            kernel: !self.no_kernel,
            params: self.param.iter().cloned().chain(params).collect(),
        }
    }
}

/// The id of the `--NAME VALUE` spelling of parameter `name`.
fn param_id(name: &str) -> String {
    format!("param:{name}")
}

/// `pcache bench NAME`'s subcommand, from the registry: its about text,
/// its parameters (each also as `--NAME VALUE`) and its variants.
fn experiment_command(e: &dyn Experiment) -> Command {
    let about = e.about().split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cmd = Command::new(e.name()).about(about);
    let mut help = String::new();
    if !e.params().is_empty() {
        help.push_str("Parameters (--param NAME=VALUE, or --NAME VALUE with - for _):\n");
        for p in e.params() {
            help.push_str(&format!("  {:<16} {}\n", p.name, p.help));
            cmd = cmd.arg(
                Arg::new(param_id(p.name))
                    .long(p.name.replace('_', "-"))
                    .value_name("VALUE")
                    .help(format!("Same as --param {}=VALUE: {}", p.name, p.help)),
            );
        }
    }
    help.push_str(&variants_help(e.presets()));
    if !help.is_empty() {
        cmd = cmd.after_help(help);
    }
    cmd
}

/// The command line: the derived commands, with one `bench` subcommand per
/// registered experiment.
fn cli() -> Command {
    Cli::command()
        .mut_subcommand("bench", |bench| {
            let bench = bench.subcommand_value_name("EXPERIMENT").subcommand_help_heading("Experiments");
            registry::EXPERIMENTS
                .iter()
                .fold(bench, |b, e| b.subcommand(experiment_command(*e)))
                .subcommand(Command::new("list").about("List the experiments."))
        })
        .mut_subcommand("replay", |replay| replay.after_help(variants_help(registry::presets("replay"))))
}

/// Which experiment `bench` names (None: the main job) and its options.
fn bench_selection(bench: &ArgMatches) -> Result<(Option<&'static dyn Experiment>, ExpOpts, SharedArgs), BoxError> {
    match bench.subcommand() {
        Some((name, m)) => {
            let shared = SharedArgs::from_arg_matches(m)?;
            let exp = registry::find(name);
            let params = exp
                .map(|e| {
                    e.params()
                        .iter()
                        .filter_map(|p| m.get_one::<String>(&param_id(p.name)).map(|v| (p.name.to_string(), v.clone())))
                        .collect()
                })
                .unwrap_or_default();
            Ok((exp, shared.exp_opts(params), shared))
        }
        None => {
            let shared = SharedArgs::from_arg_matches(bench)?;
            Ok((None, shared.exp_opts(Vec::new()), shared))
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

/// Where the JSON goes, opened before the run so that a bad path fails
/// at once rather than after minutes of benchmark.
enum JsonSink {
    Stdout,
    File(PathBuf, std::fs::File),
}

impl JsonSink {
    fn open(path: &Path) -> Result<JsonSink, BoxError> {
        if path.as_os_str() == "-" {
            return Ok(JsonSink::Stdout);
        }
        let f = std::fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(JsonSink::File(path.to_path_buf(), f))
    }

    /// The report goes to stdout, or to stderr when the JSON does.
    fn print_report(sink: &Option<JsonSink>, report: &str) {
        if matches!(sink, Some(JsonSink::Stdout)) {
            eprint!("{report}");
        } else {
            print!("{report}");
        }
    }

    fn write(self, text: &str) -> Result<(), BoxError> {
        match self {
            JsonSink::Stdout => std::io::stdout().write_all(text.as_bytes())?,
            JsonSink::File(path, mut f) => {
                f.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?
            }
        }
        Ok(())
    }
}

/// Where the main job's full report goes when `--report` does not say: a
/// new file in the system's temporary directory.
fn default_report_path() -> PathBuf {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    std::env::temp_dir().join(format!("pcache-bench-{secs}-{}.txt", std::process::id()))
}

fn bench(cmd: BenchCmd, matches: &ArgMatches) -> Result<(), BoxError> {
    let listing = matches.subcommand_name() == Some("list");
    if cmd.list || listing {
        print!("{}", registry::list());
        return Ok(());
    }
    let (named, opts, shared) = bench_selection(matches)?;
    check_sets(&shared.set)?;
    let main_job = named.is_none();
    let runs: Vec<(&'static dyn Experiment, ExpOpts)> = match named {
        Some(e) => vec![(e, opts)],
        None => registry::main_job().map(|e| (e, registry::main_job_opts(e, &opts))).collect(),
    };
    // Every experiment's options before any runs: a bad --mem is refused at
    // once, not after the main job's first minute.
    for (exp, opts) in &runs {
        exp.check(opts).map_err(|e| format!("{}: {e}", exp.name()))?;
    }
    let sink = shared.json.as_deref().map(JsonSink::open).transpose()?;
    let report_path = shared.report.clone().or_else(|| main_job.then(default_report_path));
    let mut report_file = match &report_path {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?),
        None => None,
    };
    // What is not the JSON goes to stdout, or to stderr when the JSON does.
    let say = |text: &str| JsonSink::print_report(&sink, text);
    // Said after the first experiment's results, not before: an error in
    // its options (checked as it starts) is then the only line printed.
    let mut warn_debug = cfg!(debug_assertions);
    if let (true, Some(path)) = (main_job, &report_path) {
        say(&verdict::main_job_header(runs.len(), &path.display().to_string()));
    }
    let mut outputs: Vec<(&str, String)> = Vec::new();
    let mut headlines = Vec::new();
    for (exp, opts) in &runs {
        if main_job {
            eprintln!("pcache bench: running {}", exp.name());
        }
        let start = std::time::Instant::now();
        let outcome = match experiment::run(*exp, opts) {
            Ok(o) => o,
            Err(e) => {
                // Leave no empty results file behind, nor an empty report.
                if let Some(JsonSink::File(path, _)) = &sink {
                    let _ = std::fs::remove_file(path);
                }
                if let Some(path) = report_path.as_ref().filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == 0)) {
                    let _ = std::fs::remove_file(path);
                }
                return Err(format!("{}: {e}", exp.name()).into());
            }
        };
        if let (Some(f), Some(path)) = (report_file.as_mut(), &report_path) {
            writeln!(f, "{}", outcome.report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        if main_job {
            say(&verdict::progress_line(exp.name(), start.elapsed().as_secs_f64(), &outcome.headlines));
        } else {
            say(&outcome.report);
        }
        if std::mem::take(&mut warn_debug) {
            eprintln!("pcache: warning: this is a debug build; build with --release for meaningful timings");
        }
        headlines.extend(outcome.headlines);
        outputs.push((exp.name(), outcome.json));
    }
    if !headlines.is_empty() {
        let screen = verdict::render_screen(&headlines);
        if let (Some(f), Some(path)) = (report_file.as_mut(), &report_path) {
            write!(f, "{screen}").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        say(&format!("\n{screen}"));
    }
    if let Some(path) = &report_path {
        say(&format!("full report: {}\n", path.display()));
    }
    if let Some(sink) = sink {
        // One experiment named: its own object. The main job: an object
        // keyed by experiment name, and its verdicts.
        let text = match outputs.as_slice() {
            [(_, one)] if !main_job => format!("{one}\n"),
            all => {
                let verdicts = serde_json::to_string_pretty(&headlines)?;
                let mut all = all.to_vec();
                all.push(("verdicts", verdicts));
                keyed_json(&all)
            }
        };
        sink.write(&text)?;
    }
    Ok(())
}

/// `pcache tunables`: the names `--set` takes, with their defaults as
/// `--set` spells them (JSON, strings unquoted).
fn tunables() -> Result<(), BoxError> {
    let defaults = serde_json::to_value(pcache::Tunables::default())?;
    let mut out = String::from("tunables (--set NAME=VALUE, for bench and mount; name and default):\n");
    for name in pcache_fuse::tunable_names() {
        let value = match &defaults[&name] {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        out.push_str(&format!("  {name:<28} {value}\n"));
    }
    out.push_str("run-time tunables (pcache mount --set NAME=VALUE, or written to .pcache/NAME while mounted):\n");
    for name in pcache::SYSCTL_NAMES {
        out.push_str(&format!("  {name}\n"));
    }
    print!("{out}");
    Ok(())
}

/// `--set`s refused before anything runs, in one short line naming the
/// one at fault (the engine's own error lists every name, or does not say
/// which value it could not take).
fn check_sets(sets: &[(String, String)]) -> Result<(), BoxError> {
    let known = pcache_fuse::tunable_names();
    for (name, value) in sets {
        if !known.contains(name) {
            return Err(format!("--set {name}: no such tunable (`pcache tunables` lists them)").into());
        }
        if let Err(e) = pcache::Tunables::default().with_sets([(name.as_str(), value.as_str())]) {
            return Err(format!("--set {name}={value}: {e}").into());
        }
    }
    Ok(())
}

/// How `pcache sweep` starts the driver: as `python3 -m pcache.sweep`
/// would, after looking for the package, so that a missing package (or
/// its missing compiled module) is one line rather than Python's
/// traceback, `--help` included.
const SWEEP_BOOTSTRAP: &str = "\
import importlib.util, runpy, sys
try:
    why = None if importlib.util.find_spec('pcache.sweep') else 'no module pcache.sweep'
except ImportError as e:
    why = str(e)
if why:
    sys.stderr.write('error: pcache sweep needs the pcache Python package (pip install ./crates/python): '
                     + why + '\\n')
    sys.exit(1)
runpy.run_module('pcache.sweep', run_name='__main__', alter_sys=True)
";

/// `pcache sweep`: the sweep lives in the Python package (the natural home
/// for Ray); this only starts it and passes its exit status on.
fn sweep(args: &[std::ffi::OsString]) -> ExitCode {
    let python = std::env::var_os("PCACHE_PYTHON").unwrap_or_else(|| "python3".into());
    match std::process::Command::new(&python).args(["-c", SWEEP_BOOTSTRAP]).args(args).status() {
        Ok(st) => ExitCode::from(st.code().map_or(1, |c| c.clamp(0, 255) as u8)),
        Err(e) => {
            print_error(&format!(
                "pcache sweep needs Python ({} did not start: {e}) \
                 and the pcache package (pip install ./crates/python)",
                python.to_string_lossy()
            ));
            ExitCode::FAILURE
        }
    }
}

/// An error as one line on stderr, as clap prints its own: `error: ...`
/// (a message of several lines, e.g. an I/O error quoting a file, joined).
fn print_error(msg: &str) {
    let one: Vec<&str> = msg.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    eprintln!("error: {}", one.join("; "));
}

fn main() -> ExitCode {
    let matches = cli().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.cmd {
        Cmd::Sweep { args } => return sweep(&args),
        Cmd::Tunables => tunables(),
        Cmd::Bench(cmd) => match matches.subcommand_matches("bench") {
            Some(m) => bench(cmd, m),
            None => Err("bench: no options".into()),
        },
        Cmd::Replay(cmd) => replay(cmd),
        Cmd::Mount(args) => pcache_fuse::run(&args).map_err(|e| e.into()),
        Cmd::KernelWorker { experiment, cgroup, params } => {
            match registry::kernel_worker(&experiment, &cgroup, &params) {
                Ok(v) => {
                    println!("{v}");
                    Ok(())
                }
                Err(e) => Err(e.into()),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&e.to_string());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pcache ARGS...` parsed as `main` does: the bench matches, the
    /// experiment named and its options.
    fn bench_args(args: &[&str]) -> Result<(Option<&'static str>, ExpOpts, SharedArgs), BoxError> {
        let m = cli().try_get_matches_from(std::iter::once("pcache").chain(args.iter().copied()))?;
        let bench = m.subcommand_matches("bench").ok_or("not bench")?;
        let (e, opts, shared) = bench_selection(bench)?;
        Ok((e.map(|e| e.name()), opts, shared))
    }

    #[test]
    fn cli_is_consistent() {
        cli().debug_assert();
    }

    // Goal: `pcache sweep` passes every argument, options and --help
    // included, to the Python driver untouched.
    #[test]
    fn sweep_passes_its_arguments_on() {
        let args = ["--ray", "auto", "a.trace", "--help", "--sizes", "10,20"];
        let m = cli().try_get_matches_from(["pcache", "sweep"].into_iter().chain(args)).unwrap();
        match Cli::from_arg_matches(&m).unwrap().cmd {
            Cmd::Sweep { args: got } => assert_eq!(got, args.map(std::ffi::OsString::from)),
            other => panic!("not sweep: {other:?}"),
        }
    }

    // Goal: every registered experiment is a subcommand, and the shared
    // options parse before or after its name.
    #[test]
    fn parses_shared_options_before_and_after_the_experiment() {
        for e in registry::EXPERIMENTS {
            let (name, opts, _) = bench_args(&["bench", e.name(), "--quick"]).unwrap();
            assert_eq!(name, Some(e.name()));
            assert!(opts.quick);
        }
        let (name, opts, shared) =
            bench_args(&["bench", "--json", "y.json", "hitpath", "--quick", "--ops", "5", "--param", "threads=1"])
                .unwrap();
        assert_eq!(name, Some("hitpath"));
        assert_eq!(shared.json.as_deref(), Some(Path::new("y.json")));
        assert!(opts.quick);
        assert_eq!(opts.param("ops"), Some("5"));
        assert_eq!(opts.param("threads"), Some("1"));
        let (name, _, shared) = bench_args(&["bench", "--json", "y.json"]).unwrap();
        assert_eq!(name, None, "no experiment: the main job");
        assert_eq!(shared.json.as_deref(), Some(Path::new("y.json")));
        assert!(bench_args(&["bench", "nosuch"]).is_err());
        assert!(bench_args(&["bench", "dd", "--param", "noequals"]).is_err());
    }

    // Goal: the flags README and BENCHMARKS.md quote still parse, the old
    // per-experiment ones as parameters.
    #[test]
    fn parses_the_documented_flags() {
        let (_, opts, _) = bench_args(&[
            "bench",
            "reclaim-writeback",
            "--mem",
            "64M",
            "--variants",
            "3.2,3.1",
            "--runs",
            "2",
            "--quick",
            "--dir",
            "/tmp",
            "--set",
            "dirty_ratio=20",
            "--set",
            "dirty_background_ratio=5",
            "--plot",
            "plots",
            "--no-kernel",
            "--file-size",
            "1M",
            "--fsmark-threads",
            "1,4",
        ])
        .unwrap();
        assert_eq!(opts.mem_bytes, Some(64 << 20));
        assert_eq!(opts.variants, Some(vec!["3.2".to_string(), "3.1".to_string()]));
        assert_eq!(opts.runs, Some(2));
        assert_eq!(opts.dir.as_deref(), Some(Path::new("/tmp")));
        assert_eq!(
            opts.set,
            [("dirty_ratio".to_string(), "20".to_string()), ("dirty_background_ratio".into(), "5".into())]
        );
        assert_eq!(opts.plot_dir.as_deref(), Some(Path::new("plots")));
        assert!(!opts.kernel);
        assert_eq!(opts.param("file_size"), Some("1M"));
        assert_eq!(opts.param("fsmark_threads"), Some("1,4"));
        let (_, opts, _) = bench_args(&["bench", "hitpath", "--hit-pages", "65536", "--file-mib", "64"]).unwrap();
        assert_eq!((opts.param("hit_pages"), opts.param("file_mib")), (Some("65536"), Some("64")));
        let (_, opts, _) = bench_args(&["bench", "fuse-dd", "--rounds", "7"]).unwrap();
        assert_eq!(opts.runs, Some(7), "--rounds is --runs");
        assert!(bench_args(&["bench", "reclaim-writeback", "--mem", "lots"]).is_err());
        assert!(bench_args(&["bench", "reclaim-writeback", "--set", "dirty_ratio"]).is_err());
        assert!(bench_args(&["bench", "dd", "--file-size", "1M"]).is_err(), "not a parameter of dd");
    }

    // Goal: `pcache replay`'s flags reach the registered experiment as its
    // options: the traces, sizes and the rest as parameters, the kernel
    // column off unless asked for.
    #[test]
    fn replay_flags_become_the_experiments_options() {
        let parse = |args: &[&str]| {
            let m = cli().try_get_matches_from(std::iter::once("pcache").chain(args.iter().copied())).unwrap();
            match Cli::from_arg_matches(&m).unwrap().cmd {
                Cmd::Replay(cmd) => replay_opts(&cmd),
                other => panic!("not replay: {other:?}"),
            }
        };
        let o = parse(&["replay", "a.trace", "b.csv", "--sizes", "5,33.3", "--variants", "mglru", "--threads", "2"]);
        assert_eq!(o.param("trace"), Some("a.trace,b.csv"));
        assert_eq!(o.param("sizes"), Some("5,33.3"));
        assert_eq!(o.param("threads"), Some("2"));
        assert_eq!(o.variants, Some(vec!["mglru".to_string()]));
        assert!(!o.kernel);
        let o = parse(&["replay", "a.trace", "--pages", "100", "--kernel", "--kernel-dir", "/d", "--format", "csv"]);
        assert_eq!((o.param("pages"), o.param("format")), (Some("100"), Some("csv")));
        assert!(o.kernel);
        assert_eq!(o.dir.as_deref(), Some(Path::new("/d")));
        let exp = registry::find("replay").unwrap();
        for (name, _) in &o.params {
            assert!(exp.params().iter().any(|p| p.name == name), "{name} is not a replay parameter");
        }
    }

    // Goal: `NAME --help` lists the experiment's parameters and variants.
    #[test]
    fn help_lists_parameters_and_variants() {
        let mut cmd = cli();
        let bench = cmd.find_subcommand_mut("bench").unwrap();
        let help = bench.find_subcommand_mut("reclaim-writeback").unwrap().render_long_help().to_string();
        for p in registry::find("reclaim-writeback").unwrap().params() {
            assert!(help.contains(p.name), "{help}");
        }
        assert!(help.contains("3.1") && help.contains("3.2"), "{help}");
    }
}
