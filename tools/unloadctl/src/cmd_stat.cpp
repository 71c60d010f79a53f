// unloadctl stat [-w SECONDS] [-c COUNT]: the module's statistics, every file of
// stats/ and of reported/ (what sessions claim, shown as such; read generically: counters
// added later show up without a change), with the rate of each over the interval; -w
// refreshes in place like watch(1).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "commands.hpp"
#include "error.hpp"
#include "json.hpp"
#include "stats.hpp"
#include "sysfs.hpp"
#include "tunables.hpp"

namespace unload::ctl {

namespace {

struct StatArgs {
  double interval = 1.0;  // seconds between the two samples a rate is taken over
  bool watch = false;
  uint64_t count = 1;  // reports to print (0: until interrupted)
};

StatArgs parse(const Args& args) {
  StatArgs a;
  bool have_count = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    if ((f == "-w" || f == "-c") && i + 1 >= args.size()) usage_error(f + " needs a value");
    if (f == "-w") {
      const std::string& v = args[++i];
      char* end = nullptr;
      const double s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(s) || s < 0.1 || s > 3600)
        usage_error("-w takes seconds from 0.1 to 3600, not '" + v + "'");
      a.interval = s;
      a.watch = true;
    } else if (f == "-c") {
      const auto n = parse_u32(args[++i]);
      if (!n || *n == 0) usage_error("-c takes a count from 1 to 4294967295, not '" + args[i] + "'");
      a.count = *n;
      have_count = true;
    } else {
      usage_error("stat: unknown argument '" + f + "' (stat [-w SECONDS] [-c COUNT])");
    }
  }
  if (a.watch && !have_count) a.count = 0;
  return a;
}

void sleep_s(double s) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(s);
  ts.tv_nsec = static_cast<long>((s - static_cast<double>(ts.tv_sec)) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

uint64_t value_of(const Sample& s, const std::string& name) {
  const auto it = s.values.find(name);
  return it == s.values.end() ? 0 : it->second;
}

std::string json_report(const Sample& a, const Sample& b) {
  Json j;
  j.begin_object().key("interval_s").real(b.t - a.t).key("paths").begin_array();
  for (const std::string& p : path_names()) {
    const std::string w = path_counter("writes", p), by = path_counter("bytes", p);
    j.begin_object().key("path").str(p).key("reported").boolean(is_reported(w));
    j.key("writes").num(value_of(b, w)).key("bytes").num(value_of(b, by));
    j.key("writes_per_s").real(rate(a, b, w)).key("bytes_per_s").real(rate(a, b, by));
    j.end_object();
  }
  j.end_array().key("counters").begin_object();
  for (const std::string& n : other_counters(b)) j.key(n).num(value_of(b, n));
  j.end_object().key("rates").begin_object();
  for (const std::string& n : other_counters(b))
    if (!is_gauge(n)) j.key(n).real(rate(a, b, n));
  j.end_object().key("unreadable").begin_array();
  for (const std::string& n : b.unreadable) j.str(n);
  j.end_array().end_object();
  return j.text();
}

void text_report(const Sample& a, const Sample& b) {
  std::printf("unload statistics, rates over %.1f s\n\n", b.t - a.t);
  std::printf("%-8s %16s %20s %14s %16s  %s\n", "path", "writes", "bytes", "writes/s", "bytes/s", "source");
  for (const std::string& p : path_names()) {
    const std::string w = path_counter("writes", p), by = path_counter("bytes", p);
    std::printf("%-8s %16llu %20llu %14.1f %16.1f  %s\n", p.c_str(),
                static_cast<unsigned long long>(value_of(b, w)),
                static_cast<unsigned long long>(value_of(b, by)), rate(a, b, w), rate(a, b, by),
                is_reported(w) ? "reported" : "module");
  }
  std::printf("\n%-36s %16s %14s\n", "counter", "total", "per s");
  for (const std::string& n : other_counters(b)) {
    if (is_gauge(n))
      std::printf("%-36s %16llu %14s\n", n.c_str(), static_cast<unsigned long long>(value_of(b, n)),
                  "(gauge)");
    else
      std::printf("%-36s %16llu %14.1f\n", n.c_str(), static_cast<unsigned long long>(value_of(b, n)),
                  rate(a, b, n));
  }
  std::printf("\nreported/: what the sessions claim (each writes its own counters page), not measured\n");
  if (!b.unreadable.empty())
    std::printf("\n%zu counters not shown: root only (run as root to see the refusal reasons)\n",
                b.unreadable.size());
}

}  // namespace

int cmd_stat(Options o, const Args& args) {
  const StatArgs a = parse(args);
  require_module();
  const std::string root = sysfs_root();
  const bool tty = isatty(STDOUT_FILENO) && !o.json;
  Sample prev = read_stats(root);
  for (uint64_t n = 0; a.count == 0 || n < a.count; ++n) {
    sleep_s(a.interval);
    if (!module_loaded()) fail("the unload module was unloaded");
    const Sample cur = read_stats(root);
    if (o.json) {
      std::printf("%s\n", json_report(prev, cur).c_str());
    } else {
      if (tty && a.watch)
        std::printf("\033[H\033[2J");  // in place, as watch(1)
      else if (n)
        std::printf("\n");
      text_report(prev, cur);
    }
    std::fflush(stdout);
    prev = cur;
  }
  return 0;
}

}  // namespace unload::ctl
