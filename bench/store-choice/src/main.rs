//! store-choice: measures redb and fjall on Veil's durable queue workload
//! (grouped send/receive/delete with one fsync per group, payload point reads,
//! startup scan of the state table, disk size) and prints a markdown table of
//! medians, min–max and the fjall/redb ratio. See README.md for how to run it.

mod engines;
mod workload;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use engines::{EngineKind, Result, Store};
use workload::{key, Bodies, Kind, Op, OpStream, SplitMix64, MAX_GROUP, MSGS_PER_OP};

const USAGE: &str = "\
usage: store-choice [options]
  --messages N     messages stored for the read/scan/size measurements (default 200000)
  --reps N         repetitions of every configuration, engines interleaved (default 3)
  --secs S         seconds of timed send/receive/delete per group size (default 5)
  --read-secs S    seconds of random payload reads (default 3)
  --groups LIST    ops per fsync, comma-separated, each 1..=100 (default 1,10,100)
  --engines LIST   redb,fjall,fjall-kv (default redb,fjall)
  --cache-mib N    block/page cache of each engine in MiB (default 256)
  --dir PATH       where data directories are made, not tmpfs (default /tmp/veil-store-choice)
  --out PATH       also write the markdown report there";

/// Command-line settings.
struct Args {
    messages: u64,
    reps: usize,
    secs: f64,
    read_secs: f64,
    groups: Vec<usize>,
    engines: Vec<EngineKind>,
    cache_mib: u64,
    dir: PathBuf,
    out: Option<PathBuf>,
}

impl Args {
    fn parse() -> Result<Self> {
        let mut a = Args {
            messages: 200_000,
            reps: 3,
            secs: 5.0,
            read_secs: 3.0,
            groups: vec![1, 10, 100],
            engines: vec![EngineKind::Redb, EngineKind::Fjall],
            cache_mib: 256,
            dir: PathBuf::from("/tmp/veil-store-choice"),
            out: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "-h" || flag == "--help" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            let val = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            match flag.as_str() {
                "--messages" => a.messages = val.parse()?,
                "--reps" => a.reps = val.parse()?,
                "--secs" => a.secs = val.parse()?,
                "--read-secs" => a.read_secs = val.parse()?,
                "--groups" => {
                    a.groups = val
                        .split(',')
                        .map(str::parse)
                        .collect::<std::result::Result<_, _>>()?
                }
                "--engines" => {
                    a.engines = val
                        .split(',')
                        .map(|s| EngineKind::parse(s).ok_or(format!("unknown engine {s}")))
                        .collect::<std::result::Result<_, _>>()?
                }
                "--cache-mib" => a.cache_mib = val.parse()?,
                "--dir" => a.dir = PathBuf::from(val),
                "--out" => a.out = Some(PathBuf::from(val)),
                _ => return Err(format!("unknown flag {flag}\n{USAGE}").into()),
            }
        }
        if a.groups.iter().any(|&g| g == 0 || g > MAX_GROUP) {
            return Err(format!("group sizes must be 1..={MAX_GROUP}").into());
        }
        if a.messages < MSGS_PER_OP || a.reps == 0 || a.engines.is_empty() {
            return Err("--messages >= 10, --reps >= 1 and one engine at least".into());
        }
        Ok(a)
    }
}

/// How a measured value is printed: decimals after the point.
type Metric = usize;

/// Samples per (metric row label, engine).
#[derive(Default)]
struct Samples {
    rows: Vec<(String, Metric)>,
    values: BTreeMap<(String, &'static str), Vec<f64>>,
}

impl Samples {
    fn add(&mut self, label: String, metric: Metric, engine: &'static str, v: f64) {
        if !self.rows.iter().any(|(l, _)| *l == label) {
            self.rows.push((label.clone(), metric));
        }
        self.values.entry((label, engine)).or_default().push(v);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn fmt_num(v: f64, decimals: usize) -> String {
    if decimals == 0 {
        let n = v.round() as i64;
        let s = n.abs().to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            format!("-{out}")
        } else {
            out
        }
    } else {
        format!("{v:.decimals$}")
    }
}

const OPS: Metric = 0;
const MSGS: Metric = 0;
const COMMIT_MS: Metric = 2;

/// Timed send/receive/delete on an (almost) empty store with `group` ops per fsync.
fn run_workload(
    store: &mut dyn Store,
    queue: u64,
    group: usize,
    secs: f64,
    bodies: &mut Bodies,
) -> Result<(f64, f64, f64)> {
    let mut stream = OpStream::new(queue);
    let mut ops: Vec<Op> = Vec::with_capacity(MAX_GROUP);
    // Warm-up (untimed) until every tick carries a send, a receive and a delete.
    let mut left = OpStream::warmup_ops();
    while left > 0 {
        ops.clear();
        while ops.len() < MAX_GROUP && left > 0 {
            ops.push(stream.next_op().ok_or("stream ended")?);
            left -= 1;
        }
        store.apply_group(&ops, bodies)?;
    }
    let deadline = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let (mut n_ops, mut deleted_msgs, mut groups) = (0u64, 0u64, 0u64);
    while start.elapsed() < deadline {
        ops.clear();
        for _ in 0..group {
            ops.push(stream.next_op().ok_or("stream ended")?);
        }
        store.apply_group(&ops, bodies)?;
        groups += 1;
        n_ops += ops.len() as u64;
        deleted_msgs += ops.iter().filter(|o| o.kind == Kind::Delete).count() as u64 * MSGS_PER_OP;
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Drain (untimed), one op per group so that no message's phases share a batch.
    stream.drain();
    while let Some(op) = stream.next_op() {
        store.apply_group(&[op], bodies)?;
    }
    Ok((
        n_ops as f64 / elapsed,
        deleted_msgs as f64 / elapsed,
        elapsed * 1e3 / groups as f64,
    ))
}

/// Sends `messages` messages to queue 0 in groups of 100 ops (1,000 messages per commit).
fn populate(store: &mut dyn Store, messages: u64, bodies: &mut Bodies) -> Result<f64> {
    let batches = messages / MSGS_PER_OP;
    let start = Instant::now();
    let mut ops = Vec::with_capacity(MAX_GROUP);
    for b in 0..batches {
        ops.push(Op {
            kind: Kind::Send,
            queue: 0,
            first_seq: b * MSGS_PER_OP,
        });
        if ops.len() == MAX_GROUP || b + 1 == batches {
            store.apply_group(&ops, bodies)?;
            ops.clear();
        }
    }
    Ok((batches * MSGS_PER_OP) as f64 / start.elapsed().as_secs_f64())
}

/// Random payload reads of queue 0, 10 per read transaction, for `secs`.
fn random_reads(store: &dyn Store, messages: u64, secs: f64) -> Result<f64> {
    let n = messages / MSGS_PER_OP * MSGS_PER_OP;
    let mut rng = SplitMix64(42);
    let mut keys = [[0u8; 16]; MSGS_PER_OP as usize];
    let deadline = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut reads = 0u64;
    while start.elapsed() < deadline {
        for _ in 0..100 {
            for k in keys.iter_mut() {
                *k = key(0, rng.next() % n);
            }
            store.read_payloads(&keys)?;
            reads += MSGS_PER_OP;
        }
    }
    Ok(reads as f64 / start.elapsed().as_secs_f64())
}

/// Allocated and apparent bytes of every file under `dir`.
fn disk_usage(dir: &Path) -> Result<(u64, u64)> {
    let (mut alloc, mut len) = (0, 0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let md = entry.metadata()?;
        if md.is_dir() {
            let (a, l) = disk_usage(&entry.path())?;
            alloc += a;
            len += l;
        } else {
            alloc += md.blocks() * 512;
            len += md.len();
        }
    }
    Ok((alloc, len))
}

/// Median latency in ms of `n` 4 KiB writes each followed by a sync: in place
/// + fdatasync (redb's commit pattern) and append + fsync (fjall's journal).
fn fsync_probe(dir: &Path, n: usize) -> Result<(f64, f64)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("fsync-probe");
    let buf = vec![7u8; 4096];
    let lat = |append: bool| -> Result<f64> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        f.write_all_at(&buf, 0)?;
        f.sync_all()?;
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            let t = Instant::now();
            if append {
                f.write_all_at(&buf, (i as u64 + 1) * 4096)?;
                f.sync_all()?;
            } else {
                f.write_all_at(&buf, 0)?;
                f.sync_data()?;
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(median(&times))
    };
    let r = (lat(false)?, lat(true)?);
    std::fs::remove_file(&path)?;
    Ok(r)
}

/// Everything measured for one engine in one repetition: the grouped workload
/// on a fresh directory, then load/size/startup/reads on another fresh one.
fn run_engine(args: &Args, engine: EngineKind, rep: usize, s: &mut Samples) -> Result<()> {
    let name = engine.name();
    let dir = args.dir.join(format!("{name}-{rep}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let cache = args.cache_mib * 1024 * 1024;
    let mut bodies = Bodies::new();
    let mut store = engine.open(&dir, cache)?;

    for (i, &g) in args.groups.iter().enumerate() {
        let (ops, msgs, commit) =
            run_workload(store.as_mut(), 1 + i as u64, g, args.secs, &mut bodies)?;
        eprintln!(
            "  {name:8} group {g:3}: {ops:9.0} ops/s {msgs:9.0} msgs/s {commit:6.2} ms/commit"
        );
        s.add(format!("S/R/D group {g}: ops/s"), OPS, name, ops);
        s.add(format!("S/R/D group {g}: msgs/s"), MSGS, name, msgs);
        s.add(
            format!("S/R/D group {g}: ms per commit"),
            COMMIT_MS,
            name,
            commit,
        );
    }

    drop(store);
    std::fs::remove_dir_all(&dir)?;

    // A fresh store holding only the backlog, for load, size, startup and reads.
    let mut store = engine.open(&dir, cache)?;
    let load = populate(store.as_mut(), args.messages, &mut bodies)?;
    drop(store);
    let (alloc, len) = disk_usage(&dir)?;

    let t = Instant::now();
    let store = engine.open(&dir, cache)?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let n = store.scan_state()?;
    let scan_ms = t.elapsed().as_secs_f64() * 1e3;
    let expected = args.messages / MSGS_PER_OP * MSGS_PER_OP;
    if n != expected {
        return Err(format!("{name}: scanned {n} state entries, expected {expected}").into());
    }
    let reads = random_reads(store.as_ref(), args.messages, args.read_secs)?;
    drop(store);
    std::fs::remove_dir_all(&dir)?;

    eprintln!(
        "  {name:8} load {load:.0} msgs/s, size {:.1} MiB (apparent {:.1}), open {open_ms:.1} ms, scan {scan_ms:.1} ms, reads {reads:.0}/s",
        alloc as f64 / 1048576.0,
        len as f64 / 1048576.0
    );
    let m = args.messages;
    s.add(
        "bulk load, 1,000 msgs/commit: msgs/s".to_string(),
        MSGS,
        name,
        load,
    );
    s.add(
        format!(
            "payload point reads, {} stored: reads/s",
            fmt_num(m as f64, 0)
        ),
        0,
        name,
        reads,
    );
    let ms = 1;
    s.add(
        "startup: open (after clean close): ms".into(),
        ms,
        name,
        open_ms,
    );
    s.add(
        format!("startup: scan state, {} entries: ms", fmt_num(m as f64, 0)),
        ms,
        name,
        scan_ms,
    );
    let mib = 1;
    s.add(
        format!("disk size, {} msgs (allocated): MiB", fmt_num(m as f64, 0)),
        mib,
        name,
        alloc as f64 / 1048576.0,
    );
    Ok(())
}

fn report(args: &Args, s: &Samples, probes: &[(f64, f64)]) -> String {
    let mut out = String::new();
    let engines: Vec<&'static str> = args.engines.iter().map(|e| e.name()).collect();
    out.push_str("| measurement |");
    for e in &engines {
        out.push_str(&format!(" {e} median (min–max) |"));
    }
    let base = engines[0];
    for e in engines.iter().skip(1) {
        out.push_str(&format!(" {e}/{base} |"));
    }
    out.push_str("\n|---|");
    for _ in 0..(2 * engines.len() - 1) {
        out.push_str("---:|");
    }
    out.push('\n');
    for (label, metric) in &s.rows {
        out.push_str(&format!("| {label} |"));
        let mut meds = Vec::new();
        for e in &engines {
            match s.values.get(&(label.clone(), *e)) {
                Some(v) => {
                    let (lo, hi) = v
                        .iter()
                        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    let med = median(v);
                    meds.push(Some(med));
                    out.push_str(&format!(
                        " {} ({}–{}) |",
                        fmt_num(med, *metric),
                        fmt_num(lo, *metric),
                        fmt_num(hi, *metric)
                    ));
                }
                None => {
                    meds.push(None);
                    out.push_str(" – |");
                }
            }
        }
        for m in meds.iter().skip(1) {
            match (meds[0], m) {
                (Some(b), Some(x)) if b > 0.0 => out.push_str(&format!(" {:.2} |", x / b)),
                _ => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    let inplace: Vec<f64> = probes.iter().map(|p| p.0).collect();
    let append: Vec<f64> = probes.iter().map(|p| p.1).collect();
    out.push_str(&format!(
        "\nDisk probe (median of per-rep medians, 4 KiB write + sync): in-place + fdatasync {:.2} ms, append + fsync {:.2} ms.\n",
        median(&inplace),
        median(&append)
    ));
    out
}

fn main() -> Result<()> {
    let args = Args::parse()?;
    std::fs::create_dir_all(&args.dir)?;
    eprintln!(
        "store-choice: {} messages, {} reps, {} s per group size, groups {:?}, cache {} MiB, dir {}",
        args.messages,
        args.reps,
        args.secs,
        args.groups,
        args.cache_mib,
        args.dir.display()
    );
    let mut samples = Samples::default();
    let mut probes = Vec::new();
    for rep in 0..args.reps {
        let p = fsync_probe(&args.dir, 200)?;
        eprintln!(
            "rep {}: disk probe in-place+fdatasync {:.2} ms, append+fsync {:.2} ms",
            rep + 1,
            p.0,
            p.1
        );
        probes.push(p);
        // Alternate which engine goes first so neither always runs on a cooler machine.
        let mut order = args.engines.clone();
        if rep % 2 == 1 {
            order.reverse();
        }
        for engine in order {
            run_engine(&args, engine, rep, &mut samples)?;
        }
    }
    let table = report(&args, &samples, &probes);
    println!("{table}");
    if let Some(path) = &args.out {
        let mut f = std::fs::File::create(path)?;
        writeln!(
            f,
            "<!-- store-choice {} -->",
            std::env::args().skip(1).collect::<Vec<_>>().join(" ")
        )?;
        f.write_all(table.as_bytes())?;
    }
    Ok(())
}
