// The control CLI: `gpusched apply | get | describe | delete | logs |
// events`, a thin client of a running server's control API
// (docs/control-api.md). Each command is a function that makes its HTTP
// calls, prints to `out` (results) and `err` (problems), and returns the
// exit status: kExitOk, kExitServerError (the server answered with an error:
// its message and each problem on its own indented line) or kExitUsage (bad
// arguments, or no server at the URL). AddCtlCommands wires them to CLI11.
//
// Stateless; each call opens its own connection. Thread-compatible.
#ifndef GPUSCHED_CLI_CTL_H_
#define GPUSCHED_CLI_CTL_H_

#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace CLI {
class App;
}  // namespace CLI

namespace gpusched::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitServerError = 1;
inline constexpr int kExitUsage = 2;  // also: server unreachable

struct CtlOptions {
  // http://HOST[:PORT][/PREFIX]; the scheme may be left out. https is not
  // supported yet.
  std::string server = "http://127.0.0.1:8080";
  std::string key;  // sent as "Authorization: Bearer KEY" when not empty
  // From sending a request to its answer (a delete waits for the drain).
  std::chrono::milliseconds timeout{120'000};
  std::chrono::milliseconds connect_timeout{5'000};
  // The clock for AGE columns (tests pin it).
  absl::Time now = absl::Now();
};

// `apply -f FILE`: POSTs the file ("-": `in`) to /api/v1/apply and prints
// "deployment/chat created" per object.
int RunApply(const CtlOptions& o, const std::string& file, std::istream& in,
             std::ostream& out, std::ostream& err);

// `get KIND [NAME]`: KIND is deployments | replicas | tenants | gpus | nodes
// | queues | events (singular too). `output` is "table" or "json". For the
// kinds without a GET-one endpoint, NAME filters the list (replicas and
// nodes by name, gpus by node, queues and events by deployment).
int RunGet(const CtlOptions& o, const std::string& kind,
           const std::string& name, const std::string& output,
           std::ostream& out, std::ostream& err);

// `describe deployment|tenant NAME`: the object, its replicas (deployment)
// and its last 10 events.
int RunDescribe(const CtlOptions& o, const std::string& kind,
                const std::string& name, std::ostream& out, std::ostream& err);

// `delete deployment|tenant NAME`.
int RunDelete(const CtlOptions& o, const std::string& kind,
              const std::string& name, std::ostream& out, std::ostream& err);

// `delete -f FILE`: POSTs the file to /api/v1/delete; each manifest's
// object is deleted.
int RunDeleteFile(const CtlOptions& o, const std::string& file,
                  std::istream& in, std::ostream& out, std::ostream& err);

struct LogsQuery {
  std::string deployment;
  std::string replica;  // empty: the server's default (the first)
  std::string stream;   // stdout | stderr; empty: the server's (stderr)
  int tail = 0;         // 0: the server's default (100)
};
// `logs DEPLOYMENT`: the engine log lines, verbatim.
int RunLogs(const CtlOptions& o, const LogsQuery& q, std::ostream& out,
            std::ostream& err);

struct EventsQuery {
  std::string deployment;
  std::string tenant;
  std::vector<std::string> kinds;  // any of these; empty: all
  int limit = 0;                   // 0: the server's default
};
// `events`: the newest matching events, printed oldest first.
int RunEvents(const CtlOptions& o, const EventsQuery& q,
              const std::string& output, std::ostream& out, std::ostream& err);

// `rollout ACTION ROUTE`: status (GET), or promote, promote-full, pause,
// resume, abort, retry (POST /api/v1/routes/ROUTE/rollout); prints the
// route's rollout after it. `reason` goes with abort.
int RunRollout(const CtlOptions& o, const std::string& action,
               const std::string& route, const std::string& reason,
               std::ostream& out, std::ostream& err);

// After a parse error of `app` (argv as given): for each `--flag` that the
// chosen subcommand does not know, "error: unknown flag --limt; did you
// mean --limit?" when a known one is within 2 edits, one line each; ""
// when there is none.
std::string FlagSuggestions(CLI::App& app, int argc, const char* const* argv);

struct AuditQuery {
  std::string since, until;  // RFC 3339 or unix seconds; "": unbounded
  std::string who;           // a key id, a token subject, or "key:..."
  std::string resource;      // "deployment/chat" or a kind ("deployment")
  std::string verb;
  std::string outcome;  // ok | denied | error
  int limit = 0;        // 0: the server's default (100)
};
// `audit`: the matching audit records, oldest first. `output`: table, json
// or jsonl (one record per line, as the export file has them).
int RunAudit(const CtlOptions& o, const AuditQuery& q,
             const std::string& output, std::ostream& out, std::ostream& err);
// `audit verify`: whether the audit log's hash chain holds; exits
// kExitServerError naming the first changed or removed record when not.
int RunAuditVerify(const CtlOptions& o, std::ostream& out, std::ostream& err);

// Registers the subcommands on `app`. --server defaults to
// $GPUSCHED_SERVER, --key to $GPUSCHED_KEY, else --token to
// $GPUSCHED_TOKEN (a single sign-on token, docs/access.md). A non-zero status
// leaves through CLI::RuntimeError.
void AddCtlCommands(CLI::App& app);

}  // namespace gpusched::cli

#endif  // GPUSCHED_CLI_CTL_H_
