//! hitpath's report: the parameters, the medians, the targets table and
//! the per-round samples as mmtests comparisons; the targets, judged on
//! the finished result, and the notes on how the figures were taken.

use std::fmt::Write as _;

use super::{HitpathOpts, HitpathResult, Target, MIB, TARGET_HIT_NS_1THREAD, TARGET_HOT_KERNEL_OVER_PCACHE};
use super::{
    TARGET_KERNEL_OVER_PCACHE, TARGET_PCACHE_OVER_MEMCPY, TARGET_POLICY_OVER_BUILTIN, TARGET_SCALING_2THREADS,
};
use crate::render;
use crate::stats::{Better, Comparison, Row};
use crate::verdict::{Headline, Verdict};

impl HitpathResult {
    pub fn passed(&self) -> usize {
        self.targets.iter().filter(|t| t.status == "PASS").count()
    }

    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "hitpath: {} MiB file, {} hit pages ({} MiB), {} ops x {} rounds, zipf {}, seed {}{}",
            self.opts.file_mib,
            self.opts.hit_pages,
            self.opts.hit_pages * self.page_size as u64 / MIB,
            self.opts.ops,
            self.opts.rounds,
            self.opts.zipf_s,
            self.opts.seed,
            if self.opts.quick { " (quick)" } else { "" }
        );
        if !self.optimized {
            let _ = writeln!(s, "WARNING: built without optimisations; these timings mean little");
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "median ns/op                 pcache     kernel     memcpy");
        let _ = writeln!(
            s,
            "random 4 KiB read        {:>10.1} {:>10.1} {:>10.1}",
            self.pcache_read_ns, self.kernel_pread_ns, self.memcpy_ns
        );
        let _ = writeln!(
            s,
            "hot 4 KiB read           {:>10.1} {:>10.1}",
            self.pcache_hot_read_ns, self.kernel_hot_pread_ns
        );
        for h in &self.hit {
            let _ = writeln!(
                s,
                "{:<13}, {:>2} thread{} {:>10.1}   (best {:.1}; {:.1} Mops/s total)",
                h.access,
                h.threads,
                if h.threads == 1 { " " } else { "s" },
                h.ns_per_op,
                h.best_ns_per_op,
                h.mops
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "{:<36} {:>10}  {:>10}  result", "target", "measured", "goal");
        for t in &self.targets {
            let v = match t.value {
                Some(v) if t.key.ends_with("_ns") || t.key.contains("_ns_") => format!("{v:.1} ns"),
                Some(v) => format!("{v:.2}x"),
                None => "-".to_string(),
            };
            let _ = writeln!(s, "{:<36} {:>10}  {:>10}  {}", t.name, v, t.goal, t.status);
        }
        let measured = self.targets.iter().filter(|t| t.value.is_some()).count();
        let _ = writeln!(s, "{} of {} targets met", self.passed(), measured);

        let _ = writeln!(s);
        let _ = writeln!(s, "per-round samples, ns/op (percentages against the first column; positive is better)");
        let mut cmp = Comparison::new(["kernel", "pcache", "memcpy"]);
        cmp.metric(
            "rand-4k",
            Better::Lower,
            vec![
                self.samples.kernel_pread_ns.clone(),
                self.samples.pcache_read_ns.clone(),
                self.samples.memcpy_ns.clone(),
            ],
        );
        cmp.metric(
            "hot-4k",
            Better::Lower,
            vec![self.samples.kernel_hot_pread_ns.clone(), self.samples.pcache_hot_read_ns.clone(), Vec::new()],
        );
        s.push_str(&render::render_compare_rows(&cmp, &[], &Row::ALL));
        if !self.hit.is_empty() {
            let _ = writeln!(s);
            let mut cmp = Comparison::new(self.hit.iter().map(|h| format!("{} {} thr", h.access, h.threads)));
            cmp.metric("hit-ns", Better::Lower, self.hit.iter().map(|h| h.rounds_ns_per_op.clone()).collect());
            cmp.metric("hit-mops", Better::Higher, self.hit.iter().map(|h| h.rounds_mops.clone()).collect());
            s.push_str(&render::render_compare_rows(&cmp, &[], &Row::ALL));
        }
        let _ = writeln!(s);
        let p = &self.phase_secs;
        let _ = writeln!(
            s,
            "time: setup {:.1}s, random reads {:.1}s, hot reads {:.1}s, hit setup {:.1}s, hit path {:.1}s, total {:.1}s",
            p.setup, p.random_read, p.hot_read, p.hit_setup, p.hit, p.total
        );
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

impl HitpathResult {
    /// The verdict screen's lines: pcache's own targets for the hit path,
    /// each against the kernel on the same keys in this run.
    pub fn headlines(&self) -> Vec<Headline> {
        let debug = !self.optimized;
        let judge = |met: Option<bool>| match met {
            _ if debug => Verdict::CannotJudge,
            Some(true) => Verdict::Met,
            Some(false) => Verdict::Missed,
            None => Verdict::CannotJudge,
        };
        let note = if debug { "a debug build: rebuild with --release".to_string() } else { String::new() };
        let mut out = Vec::new();
        let hot = self.hot_kernel_over_pcache;
        out.push(Headline {
            experiment: "A cached page read again and again (4 KiB read_at), against the kernel's pread".into(),
            claimed: format!("pcache's target: at least {TARGET_HOT_KERNEL_OVER_PCACHE}x faster than pread"),
            reproduced: format!("{:.1} ns, {hot:.2}x faster", self.pcache_hot_read_ns),
            kernel: format!("pread {:.1} ns", self.kernel_hot_pread_ns),
            verdict: judge(hot.is_finite().then_some(hot >= TARGET_HOT_KERNEL_OVER_PCACHE)),
            note: note.clone(),
        });
        // A cached random read against a bare copy of the same frame: the
        // copy is the physical limit; the kernel's overhead over it is what
        // a page cache costs in the kernel.
        let (p, k, c) = (self.pcache_read_ns, self.kernel_pread_ns, self.memcpy_ns);
        let (over_p, over_k) = ((p - c).max(0.0), (k - c).max(0.0));
        let met = [p, k, c].iter().all(|x| x.is_finite())
            && p / c <= TARGET_READ_OVER_COPY
            && over_p <= TARGET_OVERHEAD_SHARE * over_k;
        out.push(Headline {
            experiment: "A cached random 4 KiB read_at, against a bare copy of the same frame".into(),
            claimed: format!(
                "pcache's target: within {TARGET_READ_OVER_COPY}x the copy, at most 1/4 of the kernel's overhead"
            ),
            reproduced: format!("{p:.1} ns, {:.2}x the copy ({c:.1} ns), overhead {over_p:.1} ns", p / c),
            kernel: format!("pread {k:.1} ns, overhead {over_k:.1} ns"),
            verdict: judge(Some(met)),
            note: note.clone(),
        });
        if let (Some(single), Some(batch), Some(kernel)) =
            (self.mapped_load_ns_1thread, self.mapped_batch_ns_1thread, self.kernel_mapped_ns_1thread)
        {
            let met = batch <= kernel && single <= TARGET_MAPPED_LOAD_OVER_KERNEL * kernel;
            // Smaller key sets keep their page tables in the CPU's caches
            // and flatter both sides: say which size this was.
            let gib = (self.opts.hit_pages * self.page_size as u64) as f64 / (1u64 << 30) as f64;
            let size = if self.opts.quick {
                format!("{gib:.2} GiB of keys, the quick size (the target is set at 4 GiB)")
            } else {
                format!("{gib:.2} GiB of keys")
            };
            out.push(Headline {
                experiment: "Mapped loads (Mapping::load_u64), against the kernel's mmap on the same keys".into(),
                claimed: format!(
                    "pcache's target: batched no slower, one load at most {TARGET_MAPPED_LOAD_OVER_KERNEL}x"
                ),
                reproduced: format!(
                    "batched {batch:.1} ns ({:.2}x), one load {single:.1} ns ({:.2}x)",
                    batch / kernel,
                    single / kernel
                ),
                kernel: format!("a load from a shared mapping {kernel:.1} ns"),
                verdict: judge(Some(met)),
                note: if note.is_empty() { size } else { format!("{note}; {size}") },
            });
        }
        out
    }
}

/// A cached random read at most this many times a bare copy of the frame.
pub const TARGET_READ_OVER_COPY: f64 = 1.15;
/// ... and at most this share of the kernel's overhead over the copy.
pub const TARGET_OVERHEAD_SHARE: f64 = 0.25;
/// One mapped load at most this many times the kernel's.
pub const TARGET_MAPPED_LOAD_OVER_KERNEL: f64 = 1.3;

fn target(name: &str, key: &str, value: Option<f64>, goal: &str, pass: impl Fn(f64) -> bool) -> Target {
    let status = match value {
        Some(v) if v.is_finite() && pass(v) => "PASS",
        Some(_) => "MISS",
        None => "NOT RUN",
    };
    Target { name: name.into(), key: key.into(), value, goal: goal.into(), status: status.into() }
}

pub(super) fn targets(r: &HitpathResult) -> Vec<Target> {
    let at_least = |name: &str, key: &str, value: Option<f64>, goal: f64| {
        target(name, key, value, &format!(">= {goal:.2}x"), |v| v >= goal)
    };
    let below_hit_ns = |name: &str, key: &str, value: Option<f64>| {
        target(name, key, value, &format!("< {TARGET_HIT_NS_1THREAD} ns"), |v| v < TARGET_HIT_NS_1THREAD)
    };
    vec![
        at_least(
            "random read: kernel pread / pcache",
            "kernel_over_pcache",
            Some(r.kernel_over_pcache),
            TARGET_KERNEL_OVER_PCACHE,
        ),
        target(
            "random read: pcache / memcpy",
            "pcache_over_memcpy",
            Some(r.pcache_over_memcpy),
            &format!("<= {TARGET_PCACHE_OVER_MEMCPY:.2}x"),
            |v| v <= TARGET_PCACHE_OVER_MEMCPY,
        ),
        at_least(
            "hot read: kernel pread / pcache",
            "hot_kernel_over_pcache",
            Some(r.hot_kernel_over_pcache),
            TARGET_HOT_KERNEL_OVER_PCACHE,
        ),
        below_hit_ns("hit path, 1 thread", "hit_ns_1thread", r.hit_ns_1thread),
        at_least("hit path: 2 threads / 1 throughput", "scaling_2threads", r.scaling_2threads, TARGET_SCALING_2THREADS),
        target(
            "hit path, plug-in S3-FIFO / built-in",
            "policy_over_builtin",
            r.policy_over_builtin,
            &format!("<= {TARGET_POLICY_OVER_BUILTIN:.2}x"),
            |v| v <= TARGET_POLICY_OVER_BUILTIN,
        ),
        at_least(
            "hit path, plug-in: 2 threads / 1",
            "policy_scaling_2threads",
            r.policy_scaling_2threads,
            TARGET_SCALING_2THREADS,
        ),
        below_hit_ns("mapped access, 1 thread", "mapped_hit_ns_1thread", r.mapped_hit_ns_1thread),
        below_hit_ns("mapped: pcache - kernel mmap, 1 thr", "mapped_over_kernel_ns", r.mapped_over_kernel_ns),
        below_hit_ns("Mapping::load_u64, 1 thread", "mapped_load_ns_1thread", r.mapped_load_ns_1thread),
        below_hit_ns("Mapping::load_u64_many, per key, 1 thr", "mapped_batch_ns_1thread", r.mapped_batch_ns_1thread),
        at_least(
            "mapped access: 2 threads / 1 throughput",
            "mapped_scaling_2threads",
            r.mapped_scaling_2threads,
            TARGET_SCALING_2THREADS,
        ),
    ]
}

/// What the reader should know about how the figures were taken.
pub(super) fn notes(opts: &HitpathOpts, misses: Option<u64>) -> Vec<String> {
    let mut notes =
        vec!["hit path: the rows alternate round by round, each thread timed by its CPU time; the mapped rows, the \
         kernel's and pageref read a hashed word of each key's page"
            .to_string()];
    if let Some(m) = misses.filter(|&m| m > 0) {
        notes.push(format!("{m} pcache misses during the timed reads: the read cache was not fully warm"));
    }
    let cpus = crate::sys::cpus();
    if let Some(&k) = opts.threads.iter().find(|&&k| k > cpus) {
        notes.push(format!("{k} hit-path threads on {cpus} CPUs: the threads share CPUs"));
    }
    if cfg!(debug_assertions) {
        notes.push("debug build: run with --release for meaningful timings".into());
    }
    notes
}
