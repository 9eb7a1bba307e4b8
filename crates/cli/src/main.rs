//! `pcache`: the command line of the userspace page cache.
//!
//! ```text
//! pcache bench                      # the main job: hitpath at default size, reclaim-writeback quick
//! pcache bench --list               # the experiments
//! pcache bench hitpath [--json FILE] [--quick] [--file-mib N] [--hit-pages N] [--ops N]
//! pcache bench reclaim-writeback [--mem SIZE] [--dir PATH] [--variants 3.1,3.2] [--runs N] [--quick] [--json FILE]
//!                                 [--set NAME=VALUE]... [--plot DIR] [--no-kernel]
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use pcache_workloads::experiment::{parse_set, ExpOpts};
use pcache_workloads::hitpath::{self, HitpathOpts};
use pcache_workloads::reclaim_writeback::{self, ReclaimWritebackOpts};
use pcache_workloads::render::parse_size;
use pcache_workloads::report::ExperimentResult;
use pcache_workloads::{dd, lru_contention, small_file_server, sparsetruncate};

#[derive(Parser, Debug)]
#[command(name = "pcache", version, about = "pcache: the Linux page cache, in userspace")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run benchmarks and experiments. Without an experiment, runs the main
    /// job: every experiment in it, at default size.
    Bench(BenchCmd),
    /// Serve BACKING_DIR at MOUNTPOINT through pcache with FUSE, until
    /// unmounted (fusermount3 -u) or signalled (Ctrl-C, SIGTERM); dirty
    /// pages are written back before it exits. `.pcache/vmstat` and the
    /// tunables are at the mount root.
    Mount(pcache_fuse::MountArgs),
    /// Replay block traces (LIRS, libCacheSim csv or oracleGeneral)
    /// through pcache and report miss ratios per cache size and variant.
    Replay(ReplayCmd),
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

    /// One cache size in pages (instead of --sizes).
    #[arg(long, value_name = "N", conflicts_with_all = ["mem", "sizes"])]
    pages: Option<u64>,

    /// One cache size in bytes, e.g. 4M (instead of --sizes).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "sizes")]
    mem: Option<u64>,

    /// Cache sizes in percent of the trace's distinct pages.
    #[arg(long, value_name = "PCTS", value_delimiter = ',', default_value = "10,20,40,80")]
    sizes: Vec<f64>,

    /// Variants, comma-separated (see replay.rs's PRESETS: workingset-off,
    /// workingset-on, ...) [default: every default preset].
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
    #[arg(long, value_name = "N", default_value_t = 1)]
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

fn replay(cmd: ReplayCmd) -> Result<(), BoxError> {
    use pcache_workloads::replay::{self as rp, ReplayOpts, Sizes};
    let sizes = match (cmd.pages, cmd.mem) {
        (Some(n), _) => Sizes::Pages(vec![n]),
        (None, Some(bytes)) => Sizes::Pages(vec![bytes / rp::PAGE]),
        (None, None) => {
            if cmd.sizes.iter().any(|p| !(p.is_finite() && *p > 0.0)) {
                return Err(format!("--sizes {:?}: percentages must be above 0", cmd.sizes).into());
            }
            Sizes::Percent(cmd.sizes.clone())
        }
    };
    if cmd.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    // Plots are drawn here, after the baselines are merged.
    let opts = ReplayOpts {
        sizes,
        // Presets marked default, so a new one needs no change here.
        variants: if cmd.variants.is_empty() { rp::default_variants() } else { cmd.variants.clone() },
        plot_dir: None,
        threads: cmd.threads,
        kernel: cmd.kernel && !cmd.no_kernel,
        kernel_dir: cmd.kernel_dir.clone(),
        usable_equals_nominal: cmd.usable_equals_nominal,
    };
    rp::resolve(&opts.variants)?;
    let baselines = cmd
        .baseline
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
            Ok((p, v))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut merged = vec![0usize; baselines.len()];
    let sink = cmd.json.as_deref().map(JsonSink::open).transpose()?;
    let to_stderr = matches!(sink, Some(JsonSink::Stdout));
    let (mut all, mut results) = (Vec::new(), Vec::new());
    for path in &cmd.traces {
        let mut res = rp::run_file(path, cmd.format, &opts).map_err(|e| format!("{}: {e}", path.display()))?;
        for ((p, v), n) in baselines.iter().zip(&mut merged) {
            *n += rp::merge_baselines(std::slice::from_mut(&mut res), v, &p.display().to_string())?;
        }
        if let Some(dir) = &cmd.plot {
            rp::plot_result(&res, dir)?;
        }
        if to_stderr {
            eprintln!("{}", res.render());
        } else {
            println!("{}", res.render());
        }
        all.push(res.to_json());
        results.push(res);
    }
    if let Some(path) = &cmd.markdown {
        std::fs::write(path, rp::markdown_table(&results)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for ((p, _), n) in baselines.iter().zip(&merged) {
        if *n == 0 {
            eprintln!("pcache: warning: {} matched no trace and cache size here", p.display());
        }
    }
    if let Some(sink) = sink {
        let v = if all.len() == 1 { all.pop().unwrap() } else { serde_json::Value::Array(all) };
        sink.write(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    }
    Ok(())
}

#[derive(Args, Debug)]
struct BenchCmd {
    #[command(subcommand)]
    experiment: Option<Experiment>,

    /// List the experiments and exit.
    #[arg(long)]
    list: bool,

    #[command(flatten)]
    common: CommonArgs,
}

/// Options every experiment takes, before or after its name.
#[derive(Args, Debug, Clone)]
struct CommonArgs {
    /// Write the results as JSON to FILE ("-" for stdout; the report then
    /// goes to stderr).
    #[arg(long, value_name = "FILE", global = true)]
    json: Option<PathBuf>,

    /// Reduced sizes, for tests and CI.
    #[arg(long, global = true)]
    quick: bool,

    /// Seed of every random choice.
    #[arg(long, value_name = "N", global = true)]
    seed: Option<u64>,

    /// Repetitions of each measurement (the median is reported).
    #[arg(long, value_name = "N", global = true)]
    rounds: Option<usize>,

    /// Directory to create temporary files in [default: the system's].
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<PathBuf>,

    /// Draw no progress bars.
    #[arg(long, global = true)]
    no_progress: bool,
}

/// The experiments. Each is a subcommand of `bench` with its own options;
/// `MAIN_JOB` says which ones `pcache bench` alone runs.
#[derive(Subcommand, Debug, Clone)]
enum Experiment {
    /// The cache-hit path: pcache read_at against kernel pread and memcpy,
    /// hot reads, and find_page with 1 and 2 threads.
    Hitpath(HitpathArgs),
    /// Seed 004, writeback from reclaim: fs_mark, parallel dd and streaming
    /// writes under memory pressure, Linux 3.1 against 3.2, compare-kernels
    /// report.
    ReclaimWriteback(ReclaimWritebackArgs),
    /// Seed 000, dd of a file of 1/10 of memory, repeated, async and
    /// fdatasync, memory and real files: 3.15 vanilla against accessed-v2.
    Dd(SeedArgs),
    /// Seed 001, sparse files read once then truncated: drain on every
    /// pagevec release against once per lifecycle.
    Sparsetruncate(SeedArgs),
    /// Seed 002, threads hitting cached pages: 2.6.10 immediate activation
    /// against batched mark_page_accessed.
    LruContention(SeedArgs),
    /// Seed 003, a SPECweb99-like small-file server under streaming, every
    /// M7 re-mark rule; small-chunk scans and 128-byte random reads.
    SmallFileServer(SeedArgs),
    /// The seed's dd as a real program through a `pcache mount`, against
    /// the same dd through the library and through the kernel: the cost
    /// of FUSE. Skips the mount column without FUSE.
    FuseDd(FuseDdArgs),
    /// List the experiments.
    List,
}

/// Options of `pcache bench fuse-dd`.
#[derive(Args, Debug, Clone, Default)]
struct FuseDdArgs {
    /// Cache size of the library and the mount [default: 512M; quick: 64M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    mem: Option<u64>,

    /// Size of dd's file in MiB [default: 64; quick: 8].
    #[arg(long, value_name = "N")]
    file_mib: Option<u64>,

    /// Runs of each workload (the median is reported) [default: 5; quick: 3].
    #[arg(long, value_name = "N")]
    runs: Option<usize>,
}

fn run_fuse_dd(args: &FuseDdArgs, common: &CommonArgs) -> Result<Outcome, BoxError> {
    use pcache_workloads::fuse_dd::{self, FuseDdOpts};
    let exe = std::env::current_exe()?;
    let mut opts = if common.quick { FuseDdOpts::quick(exe) } else { FuseDdOpts::new(exe) };
    if let Some(v) = args.mem {
        opts.mem_bytes = v;
    }
    if let Some(v) = args.file_mib {
        opts.file_bytes = v << 20;
    }
    if let Some(v) = args.runs.or(common.rounds) {
        opts.runs = v;
    }
    opts.dir = common.dir.clone();
    let result = fuse_dd::run(&opts)?;
    Ok(Outcome { report: result.report(), json: serde_json::to_string_pretty(&result)? })
}

impl Experiment {
    fn name(&self) -> &'static str {
        match self {
            Experiment::Hitpath(_) => "hitpath",
            Experiment::ReclaimWriteback(_) => "reclaim-writeback",
            Experiment::Dd(_) => "dd",
            Experiment::Sparsetruncate(_) => "sparsetruncate",
            Experiment::LruContention(_) => "lru-contention",
            Experiment::SmallFileServer(_) => "small-file-server",
            Experiment::FuseDd(_) => "fuse-dd",
            Experiment::List => "list",
        }
    }
}

/// Options of the seed experiments.
#[derive(Args, Debug, Clone, Default)]
struct SeedArgs {
    /// Page cache size, e.g. 128M or 1G [default: the experiment's].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    mem: Option<u64>,

    /// Variants to compare, comma-separated; the first is the baseline.
    #[arg(long, value_name = "NAME,NAME", value_delimiter = ',')]
    variants: Option<Vec<String>>,

    /// Runs of every measurement. Overrides --rounds.
    #[arg(long, value_name = "N")]
    runs: Option<usize>,

    /// Set a tunable for every variant, by name (repeatable), e.g.
    /// --set dirty_ratio=40 --set remark_rule=PrevIndex.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, String)>,

    /// Write SVG plots to DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,

    /// Skip the kernel column.
    #[arg(long)]
    no_kernel: bool,

    /// In the main job: always the quick sizes.
    #[arg(skip)]
    main_job: bool,
}

/// The main job: what `pcache bench` runs with no experiment named.
fn main_job() -> Vec<Experiment> {
    let quick = || SeedArgs { main_job: true, ..SeedArgs::default() };
    vec![
        Experiment::Hitpath(HitpathArgs::default()),
        Experiment::ReclaimWriteback(ReclaimWritebackArgs { main_job: true, ..ReclaimWritebackArgs::default() }),
        Experiment::Dd(quick()),
        Experiment::Sparsetruncate(quick()),
        Experiment::LruContention(quick()),
        Experiment::SmallFileServer(quick()),
    ]
}

#[derive(Args, Debug, Clone, Default)]
struct HitpathArgs {
    /// Size of the host file for the read measurements, MiB [default: 256; quick: 64].
    #[arg(long, value_name = "N")]
    file_mib: Option<u64>,

    /// Pages (4 KiB) of the memory-backed file for the hit path [default: 1048576; quick: 65536].
    #[arg(long, value_name = "N")]
    hit_pages: Option<u64>,

    /// Operations per measurement, per thread on the hit path [default: 2000000; quick: 200000].
    #[arg(long, value_name = "N")]
    ops: Option<u64>,

    /// Hit-path thread counts, comma-separated [default: 1,2].
    #[arg(long, value_name = "N,N", value_delimiter = ',')]
    threads: Option<Vec<usize>>,
}

#[derive(Args, Debug, Clone, Default)]
struct ReclaimWritebackArgs {
    /// Page cache size, e.g. 128M or 1G [default: 128M; quick: 32M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    mem: Option<u64>,

    /// Variants to compare, comma-separated; the first is the baseline [default: 3.1,3.2].
    #[arg(long, value_name = "NAME,NAME", value_delimiter = ',')]
    variants: Option<Vec<String>>,

    /// Runs of every workload under every variant [default: 5; quick: 3]. Overrides --rounds.
    #[arg(long, value_name = "N")]
    runs: Option<usize>,

    /// fs_mark file size, e.g. 10M [default: 10M; quick: 1M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    file_size: Option<u64>,

    /// fs_mark thread counts, comma-separated [default: 1,4,16].
    #[arg(long, value_name = "N,N", value_delimiter = ',')]
    fsmark_threads: Option<Vec<usize>>,

    /// simple-wb writers [default: one per CPU].
    #[arg(long, value_name = "N")]
    wb_threads: Option<usize>,

    /// Set a tunable for every variant, by name (repeatable), after its
    /// preset, e.g. --set dirty_ratio=20.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, String)>,

    /// Write SVG plots of dirty, writeback and free pages over time to DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,

    /// Skip the kernel column.
    #[arg(long)]
    no_kernel: bool,

    /// In the main job: always the quick sizes.
    #[arg(skip)]
    main_job: bool,
}

type BoxError = Box<dyn std::error::Error>;

/// What one experiment produced.
struct Outcome {
    report: String,
    /// Pretty JSON, fields in the order the result struct declares them.
    json: String,
}

fn run_hitpath(args: &HitpathArgs, common: &CommonArgs) -> Result<Outcome, BoxError> {
    let mut opts = if common.quick { HitpathOpts::quick() } else { HitpathOpts::default() };
    if let Some(v) = args.file_mib {
        opts.file_mib = v;
    }
    if let Some(v) = args.hit_pages {
        opts.hit_pages = v;
    }
    if let Some(v) = args.ops {
        opts.ops = v;
    }
    if let Some(v) = &args.threads {
        opts.threads = v.clone();
    }
    if let Some(v) = common.seed {
        opts.seed = v;
    }
    if let Some(v) = common.rounds {
        opts.rounds = v;
    }
    opts.dir = common.dir.clone();
    opts.progress = !common.no_progress;
    opts.validate()?;
    let result = hitpath::run(&opts)?;
    Ok(Outcome { report: result.report(), json: serde_json::to_string_pretty(&result)? })
}

fn run_reclaim_writeback(args: &ReclaimWritebackArgs, common: &CommonArgs) -> Result<Outcome, BoxError> {
    let mut opts =
        if common.quick || args.main_job { ReclaimWritebackOpts::quick() } else { ReclaimWritebackOpts::default() };
    if let Some(v) = args.mem {
        opts.mem_bytes = v;
    }
    if let Some(v) = &args.variants {
        opts.variants = v.iter().map(|s| s.trim().to_string()).collect();
    }
    if let Some(v) = args.runs.or(common.rounds) {
        opts.runs = v;
    }
    if let Some(v) = args.file_size {
        opts.fsmark_file_bytes = v;
    }
    if let Some(v) = &args.fsmark_threads {
        opts.fsmark_threads = v.clone();
    }
    if let Some(v) = args.wb_threads {
        opts.wb_threads = v;
    }
    opts.set = args.set.clone();
    opts.plot_dir = args.plot.clone();
    opts.kernel = !args.no_kernel;
    opts.dir = common.dir.clone();
    opts.progress = !common.no_progress;
    opts.validate()?;
    let result = reclaim_writeback::run(&opts)?;
    Ok(Outcome { report: reclaim_writeback::report(&result), json: result.to_json_pretty()? })
}

type SeedRun = fn(&ExpOpts) -> pcache_workloads::Result<ExperimentResult>;
type SeedReport = fn(&ExperimentResult) -> String;

fn run_seed(args: &SeedArgs, common: &CommonArgs, run: SeedRun, report: SeedReport) -> Result<Outcome, BoxError> {
    let opts = ExpOpts {
        mem_bytes: args.mem,
        variants: args.variants.clone(),
        runs: args.runs.or(common.rounds),
        quick: common.quick || args.main_job,
        dir: common.dir.clone(),
        progress: !common.no_progress,
        seed: common.seed.unwrap_or(1),
        plot_dir: args.plot.clone(),
        set: args.set.clone(),
        kernel: !args.no_kernel,
    };
    let result = run(&opts)?;
    Ok(Outcome { report: report(&result), json: result.to_json_pretty()? })
}

fn run_experiment(exp: &Experiment, common: &CommonArgs) -> Result<Outcome, BoxError> {
    match exp {
        Experiment::Hitpath(args) => run_hitpath(args, common),
        Experiment::ReclaimWriteback(args) => run_reclaim_writeback(args, common),
        Experiment::Dd(a) => run_seed(a, common, dd::run, dd::report),
        Experiment::Sparsetruncate(a) => run_seed(a, common, sparsetruncate::run, sparsetruncate::report),
        Experiment::LruContention(a) => run_seed(a, common, lru_contention::run, lru_contention::report),
        Experiment::SmallFileServer(a) => run_seed(a, common, small_file_server::run, small_file_server::report),
        Experiment::FuseDd(args) => run_fuse_dd(args, common),
        Experiment::List => Ok(Outcome { report: list_experiments(), json: "{}".into() }),
    }
}

fn list_experiments() -> String {
    let mut out = String::from("experiments (pcache bench NAME --help for options):\n");
    let main: Vec<&str> = main_job().iter().map(Experiment::name).collect();
    let mut cmd = Cli::command();
    cmd.build();
    if let Some(bench) = cmd.find_subcommand("bench") {
        for sub in bench.get_subcommands().filter(|s| !matches!(s.get_name(), "help" | "list")) {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let about = about.split_whitespace().collect::<Vec<_>>().join(" ");
            let tag = if main.contains(&sub.get_name()) { " [main job]" } else { "" };
            out.push_str(&format!("  {:<18} {}{}\n", sub.get_name(), about, tag));
        }
    }
    out
}

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

/// `{"name": {...}, ...}` from pretty-printed JSON texts, keeping each
/// text's field order.
fn keyed_object(parts: &[(&str, String)]) -> String {
    let mut s = String::from("{\n");
    for (i, (name, text)) in parts.iter().enumerate() {
        let sep = if i + 1 < parts.len() { "," } else { "" };
        // Pretty JSON has newlines only between tokens, so indenting
        // after each one is safe.
        s.push_str(&format!("  \"{name}\": {}{sep}\n", text.replace('\n', "\n  ")));
    }
    s.push_str("}\n");
    s
}

fn bench(cmd: BenchCmd) -> Result<(), BoxError> {
    if cmd.list || matches!(cmd.experiment, Some(Experiment::List)) {
        print!("{}", list_experiments());
        return Ok(());
    }
    let common = cmd.common;
    let sink = common.json.as_deref().map(JsonSink::open).transpose()?;
    let report_to_stderr = matches!(sink, Some(JsonSink::Stdout));
    if cfg!(debug_assertions) {
        eprintln!("pcache: warning: this is a debug build; build with --release for meaningful timings");
    }

    let (experiments, is_main_job) = match cmd.experiment {
        Some(e) => (vec![e], false),
        None => (main_job(), true),
    };
    let mut outputs: Vec<(&str, String)> = Vec::new();
    for exp in &experiments {
        if is_main_job {
            eprintln!("pcache bench: running {}", exp.name());
        }
        let outcome = match run_experiment(exp, &common) {
            Ok(o) => o,
            Err(e) => {
                // Leave no empty results file behind.
                if let Some(JsonSink::File(path, _)) = &sink {
                    let _ = std::fs::remove_file(path);
                }
                return Err(format!("{}: {e}", exp.name()).into());
            }
        };
        if report_to_stderr {
            eprint!("{}", outcome.report);
        } else {
            print!("{}", outcome.report);
        }
        outputs.push((exp.name(), outcome.json));
    }
    if let Some(sink) = sink {
        // One experiment named: its own object. The main job: an object
        // keyed by experiment name.
        let text = match outputs.as_slice() {
            [(_, one)] if !is_main_job => format!("{one}\n"),
            all => keyed_object(all),
        };
        sink.write(&text)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Bench(cmd) => bench(cmd),
        Cmd::Replay(cmd) => replay(cmd),
        Cmd::Mount(args) => pcache_fuse::run(&args).map_err(|e| e.into()),
        Cmd::KernelWorker { experiment, cgroup, params } => {
            match pcache_workloads::kernel::worker_main(&experiment, &cgroup, &params) {
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
            eprintln!("pcache: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_global_options_after_the_experiment() {
        let cli =
            Cli::try_parse_from(["pcache", "bench", "hitpath", "--quick", "--json", "x.json", "--ops", "5"]).unwrap();
        let Cmd::Bench(b) = cli.cmd else { panic!("not bench") };
        assert!(b.common.quick);
        assert_eq!(b.common.json.as_deref(), Some(Path::new("x.json")));
        match b.experiment {
            Some(Experiment::Hitpath(a)) => assert_eq!(a.ops, Some(5)),
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["pcache", "bench", "--json", "y.json"]).unwrap();
        let Cmd::Bench(b) = cli.cmd else { panic!("not bench") };
        assert!(b.experiment.is_none());
        assert_eq!(b.common.json.as_deref(), Some(Path::new("y.json")));
        assert!(Cli::try_parse_from(["pcache", "bench", "hitpath", "--ops", "many"]).is_err());
        assert!(Cli::try_parse_from(["pcache", "bench", "nosuch"]).is_err());
    }

    #[test]
    fn parses_reclaim_writeback() {
        let cli = Cli::try_parse_from([
            "pcache",
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
        ])
        .unwrap();
        let Cmd::Bench(b) = cli.cmd else { panic!("not bench") };
        assert!(b.common.quick);
        assert_eq!(b.common.dir.as_deref(), Some(Path::new("/tmp")));
        match b.experiment {
            Some(Experiment::ReclaimWriteback(a)) => {
                assert_eq!(a.mem, Some(64 << 20));
                assert_eq!(a.variants, Some(vec!["3.2".to_string(), "3.1".to_string()]));
                assert_eq!(a.runs, Some(2));
                assert_eq!(
                    a.set,
                    [("dirty_ratio".to_string(), "20".to_string()), ("dirty_background_ratio".into(), "5".into())]
                );
                assert_eq!(a.plot.as_deref(), Some(Path::new("plots")));
                assert!(a.no_kernel);
                assert!(!a.main_job);
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["pcache", "bench", "reclaim-writeback", "--mem", "lots"]).is_err());
        assert!(Cli::try_parse_from(["pcache", "bench", "reclaim-writeback", "--set", "dirty_ratio"]).is_err());
        assert!(main_job().iter().any(|e| matches!(e, Experiment::ReclaimWriteback(a) if a.main_job)));
    }

    #[test]
    fn keyed_object_is_json() {
        // Pretty JSON as a struct serialises it: fields in declaration order.
        let a = "{\n  \"z\": 1,\n  \"a\": [\n    1,\n    2\n  ],\n  \"s\": \"x\\ny\"\n}".to_string();
        let text = keyed_object(&[("one", a.clone()), ("two", a)]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["two"]["s"], "x\ny");
        assert_eq!(v["one"]["a"][1], 2);
        assert!(text.find("\"z\"").unwrap() < text.find("\"a\"").unwrap());
    }

    #[test]
    fn list_names_every_experiment() {
        let list = list_experiments();
        for e in main_job() {
            assert!(list.contains(e.name()), "{list}");
        }
        assert!(list.contains("[main job]"));
    }
}
