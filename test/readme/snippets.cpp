// The C++ snippets of README.md and docs/*.md, compiled and run (ctest readme_snippets_run,
// against a throwaway redis-server through scripts/with-redis.sh). Each ```cpp block there is
// the marked region of the same name here, `//[name` ... `//]`, with the indentation stripped
// and the lines between `//<-` and `//->` left out; ctest readme_snippets
// (test/readme/check_snippets.sh) fails when the two differ. A region's name starts with the
// page that shows it (readme_, guide_, options_, ...). The package_consumer test builds
// this file as the quick start's refund.cpp against the installed package.
//
// One translation unit for all the snippets: the quick start's main() runs it, then (in the
// hidden lines) the others.

//[readme_quick_start
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators; // for ||

asio::awaitable<void> do_refund() { // the work that must not run twice at once
    asio::steady_timer work{co_await asio::this_coro::executor, std::chrono::milliseconds{100}};
    co_await work.async_wait(asio::use_awaitable);
}

asio::awaitable<void> refund(colock::redis::config cfg) {
    colock::redis::connection conn{co_await asio::this_coro::executor, cfg}; // one for all
    co_await conn.async_connect(); // or lazily on first use

    colock::locker locker{conn};
    auto guard = co_await locker.co_lock("refund:acct-42"); // waits, retries, renews
    co_await (do_refund() || guard.wait_lost());            // work stops if the lease is lost
    co_await guard.release(); // or let the guard go: conn.close() gives back what is held
    conn.close();             // sends what is pending, ends the background work: io.run() returns
}

//<-
int run_other_snippets(colock::redis::config const& cfg);
//->
int main() {
    try {
        char const* url = std::getenv("COLOCK_REDIS_URL"); // e.g. redis://127.0.0.1:6379/0
        auto cfg = colock::redis::config::from_url(url && *url ? url : "redis://127.0.0.1:6379");
        asio::io_context io;
        asio::co_spawn(io, refund(cfg), [](std::exception_ptr e) {
            if (e)
                std::rethrow_exception(e); // out of io.run(), into the catch below
        });
        io.run();
        std::cout << "refunded\n";
        //<-
        return run_other_snippets(cfg);
        //->
    } catch (std::exception const& e) { // a bad URL, a lock not taken, a lost connection
        std::cerr << "refund: " << e.what() << "\n";
        return 1;
    }
}
//]

// ------------------------------------------------------------------------------------------
// The other snippets, in functions that give them what they use. Nothing below is shown in
// the documentation outside a marked region. The headers each snippet shows (its //+ lines) are
// included here, where the check (ctest readme_snippets) finds them.

#include <colock/diagnostics.hpp>
#include <colock/election.hpp>
#include <colock/error.hpp>
#include <colock/fenced_resource.hpp>
#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>
#include <colock/lock_scope.hpp>
#include <colock/lock_status.hpp>
#include <colock/locker.hpp>
#include <colock/redis/config.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <unistd.h>

namespace {

// Stands for the resource a lock protects: it refuses a write with a lower fence than the
// highest it has seen.
struct invoice_store {
    std::int64_t highest = 0;
    std::string content;
    int refused = 0;

    asio::awaitable<void> write(std::int64_t fence, std::string data) {
        if (fence < highest) {
            ++refused;
            throw std::runtime_error("invoice_store: refused a write from an earlier holder");
        }
        highest = fence;
        content = std::move(data);
        co_return;
    }
};

asio::awaitable<std::int64_t> fencing(colock::locker& locker, invoice_store& store,
                                      std::string data) {
    //[safety_fencing
    //+ #include <colock/locker.hpp>
    //+
    auto guard = co_await locker.co_lock("invoice:42");
    co_await store.write(guard.fence(), data); // the store: if (fence < highest) refuse;
                                               //            highest = fence; apply
    //]
    auto const fence = guard.fence();
    co_await guard.release();
    co_return fence;
}

// The job's record in Redis, which takes writes under the highest fence it has seen only.
asio::awaitable<std::int64_t> finish_job(colock::redis::connection& conn, colock::locker& locker) {
    //[safety_fenced_resource
    //+ #include <colock/fenced_resource.hpp>
    //+ #include <colock/locker.hpp>
    //+
    // The fence key and the job's keys share a hash tag: one script checks and writes.
    colock::fenced_resource job{conn, "job:{42}:fence"};
    auto guard = co_await locker.co_lock("job:42");
    co_await job.co_write(
        guard,
        colock::fenced_writes{}.hset("job:{42}", "state", "done").hincr_by("job:{42}", "runs", 1));
    // A holder paused past its lease gets error::stale_fence here once a later holder has
    // written, and nothing of its batch is applied.
    //]
    auto const fence = guard.fence();
    co_await guard.release();
    co_return fence;
}

void keep(colock::lock_guard) {} // stands for a program that keeps a guard

// The async forms, failing with the awaitable forms' exceptions.
[[maybe_unused]] asio::awaitable<void>
with_their_text(colock::locker& locker, std::string const& name, colock::lock_options opt) {
    //[guide_with_diagnostics
    //+ #include <colock/diagnostics.hpp>
    //+ #include <colock/locker.hpp>
    //+
    //+ #include <boost/asio/use_awaitable.hpp>
    //+ #include <boost/asio/use_future.hpp>
    //+
    //+ #include <exception>
    //+
    // Throws what co_lock throws ("colock: lock 'a': not acquired within ..."):
    auto guard =
        co_await locker.async_lock(name, opt, colock::with_diagnostics(asio::use_awaitable));
    // get() throws it:
    auto next = locker.async_lock(name, opt, colock::with_diagnostics(asio::use_future));
    // e: null, or that exception:
    locker.async_lock(name, opt,
                      colock::with_diagnostics([](std::exception_ptr e, colock::lock_guard g) {
                          if (!e)
                              keep(std::move(g));
                      }));
    //]
    keep(std::move(guard));
    static_cast<void>(next);
}

asio::awaitable<void> move_money() { // the work that needs both accounts
    co_return;
}

// Moves money between two accounts under both of their locks, taken at once.
asio::awaitable<std::int64_t> transfer(colock::locker& locker) {
    //[guide_lock_all
    //+ #include <colock/locker.hpp>
    //+
    //+ #include <boost/asio/experimental/awaitable_operators.hpp>
    //+
    //+ #include <string>
    //+ #include <vector>
    //+
    // Both accounts or neither: no deadlock with a transfer the other way round.
    std::vector<std::string> const both{"account:7", "account:42"};
    auto accounts = co_await locker.co_lock_all(both);
    co_await (move_money() || accounts.wait_lost()); // work stops with the lease
    auto const fence = accounts.fence("account:42"); // each name's own, for its resource
    co_await accounts.release();
    //]
    co_return fence;
}

//[guide_not_reentrant
//+ #include <colock/locker.hpp>
//+
//+ #include <stdexcept>
//+
// Takes the account's lock once and hands the guard to the code that needs the lock held.
asio::awaitable<void> apply_fee(colock::lock_guard const& account) {
    if (!account.owns()) // lost meanwhile: do not touch the account
        throw std::runtime_error("apply_fee: the lock on the account is gone");
    co_return; // ... read and write the account ...
}

asio::awaitable<void> close_account(colock::locker& locker) {
    auto account = co_await locker.co_lock("account:42");
    co_await apply_fee(account); // not a second co_lock("account:42"): it would wait for
                                 // `account`, which only this coroutine can release
    co_await account.release();
}
//]

//[guide_with_lock
//+ #include <colock/locker.hpp>
//+
//+ #include <cstdint>
//+
// The work gets the guard (for its fence); the lock goes back when it ends.
asio::awaitable<std::int64_t> charge(colock::locker& locker) {
    co_return co_await locker.co_with_lock(
        "account:42", [](colock::lock_guard& account) -> asio::awaitable<std::int64_t> {
            co_return account.fence(); // ... write the account, fenced ...
        });
}
//]

// The term of the last schedule() run.
std::int64_t last_term = 0;

//[election_scheduler
//+ #include <colock/election.hpp>
//+
//+ #include <boost/asio/experimental/awaitable_operators.hpp>
//+ #include <boost/asio/steady_timer.hpp>
//+ #include <boost/asio/this_coro.hpp>
//+ #include <boost/asio/use_awaitable.hpp>
//+
//+ #include <chrono>
//+ #include <cstdint>
//+
// A scheduler that runs on one node at a time: it waits to lead, works while it leads, and
// gives the leadership up when asked to stop.
asio::awaitable<void> run_jobs([[maybe_unused]] std::int64_t term) { // writes pass the term
    asio::steady_timer tick{co_await asio::this_coro::executor, std::chrono::milliseconds{50}};
    co_await tick.async_wait(asio::use_awaitable); // ... the jobs of one tick ...
}

asio::awaitable<void> schedule(colock::locker& locker) {
    colock::election election{locker, "scheduler"};
    colock::leadership lead = co_await election.co_campaign("node-a:8080"); // waits to lead
    co_await (run_jobs(lead.term()) || lead.wait_lost()); // stops if the lease is lost
    //<-
    last_term = lead.term();
    //->
    co_await lead.release(); // the next candidate leads at once
}
//]

//[rw_lock_catalog
//+ #include <colock/rw_lock.hpp>
//+
//+ #include <fmt/format.h>
//+
//+ #include <cstdint>
//+ #include <string>
//+
// A catalog that many requests read and one job rebuilds: the readers share the lock; the
// rebuild waits for the readers ahead of it, and holds back the ones after it until it is done.
asio::awaitable<std::string> read_catalog(colock::locker& locker) {
    colock::rw_lock catalog{locker, "catalog"};
    colock::read_guard reading = co_await catalog.co_lock_shared();
    // The fence of the last writer: the version this reader sees.
    std::string page = fmt::format("catalog version {}", reading.fence());
    co_await reading.release();
    co_return page;
}

asio::awaitable<std::int64_t> rebuild_catalog(colock::locker& locker) {
    colock::rw_lock catalog{locker, "catalog"};
    colock::write_guard writing = co_await catalog.co_lock();
    std::int64_t const version = writing.fence(); // strictly increasing per lock
    // ... write the new catalog, tagged with `version` ...
    colock::read_guard checking = co_await writing.co_downgrade(); // no gap; readers come in
    // ... check what was written, beside them ...
    co_await checking.release();
    co_return version;
}
//]

//[election_who_leads
//+ #include <colock/election.hpp>
//+
//+ #include <fmt/format.h>
//+
//+ #include <optional>
//+ #include <string>
//+
// Who leads now, and every change from here on.
asio::awaitable<std::string> who_leads(colock::locker& locker) {
    colock::election election{locker, "scheduler"};
    std::optional<colock::leader_info> now = co_await election.co_leader();
    std::string line = now ? fmt::format("{} leads (term {}, pid {})", now->value, now->term,
                                         now->holder ? now->holder->pid : 0)
                           : "nobody leads";
    colock::leader_watch changes = election.observe();
    if (std::optional<colock::leader_change> c = co_await changes.co_next()) // the state now
        line += c->leading ? "; watching " + c->value : "; watching, nobody leads";
    co_return line;
}
//]

// How many exports ran, and the most at once.
int exports_running = 0;
int exports_peak = 0;
int exports_done = 0;

//[semaphore_exports
//+ #include <colock/semaphore.hpp>
//+
//+ #include <boost/asio/experimental/awaitable_operators.hpp>
//+ #include <boost/asio/steady_timer.hpp>
//+ #include <boost/asio/this_coro.hpp>
//+ #include <boost/asio/use_awaitable.hpp>
//+
//+ #include <chrono>
//+
// At most 4 exports at once, over every process that runs this.
asio::awaitable<void> run_export() { // calls the service that takes 4 at a time
    asio::steady_timer work{co_await asio::this_coro::executor, std::chrono::milliseconds{50}};
    co_await work.async_wait(asio::use_awaitable);
}

asio::awaitable<void> export_report(colock::locker& locker) {
    colock::semaphore exports{locker, "exports", 4}; // every user of "exports" gives 4
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{30};         // a dead holder's permit comes back in 30 s
    opt.wait_timeout = std::chrono::minutes{5}; // then co_acquire throws error::timeout
    colock::permit p = co_await exports.co_acquire(opt); // waits its turn, first come first served
    //<-
    exports_peak = std::max(exports_peak, ++exports_running);
    //->
    co_await (run_export() || p.wait_lost()); // stops if the lease is lost
    //<-
    --exports_running;
    ++exports_done;
    //->
    co_await p.release(); // the next waiting call, of any process, starts
}
//]

//[semaphore_bulk
//+ #include <colock/semaphore.hpp>
//+
//+ #include <boost/asio/experimental/awaitable_operators.hpp>
//+
//+ #include <cstddef>
//+ #include <optional>
//+
// A bulk job takes 3 permits at once, or skips this round if they are not free now.
asio::awaitable<std::optional<std::size_t>> bulk_export(colock::locker& locker) {
    colock::semaphore exports{locker, "exports", 4};
    std::optional<colock::permit> three = co_await exports.co_try_acquire(3);
    if (!three)
        co_return std::nullopt; // busy: the next round

    std::size_t const left = co_await exports.co_available(); // 1 while these 3 are held
    co_await (run_export() || three->wait_lost());            // one lease for the 3 permits
    co_await three->release();                                // all 3 come back together
    co_return left;
}
//]

//[semaphore_capacity
//+ #include <colock/error.hpp>
//+ #include <colock/semaphore.hpp>
//+
//+ #include <boost/system/system_error.hpp>
//+
//+ #include <string>
//+
// A user that gives another capacity is refused at the server, and nothing changes.
asio::awaitable<std::string> wrong_capacity(colock::locker& locker) {
    colock::semaphore exports{locker, "exports", 8}; // the others give 4
    try {
        colock::permit p = co_await exports.co_acquire();
        co_return "acquired?!";
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::invalid_argument)
            throw;
        co_return e.what(); // semaphore 'exports' has capacity 4 at the server, not 8: ...
    }
}
//]

//[guide_scope
//+ #include <colock/lock_scope.hpp>
//+
//+ #include <cstddef>
//+
// One request, one scope: the helpers it calls take the account's lock through the scope and
// get the request's lease again, at once; it goes back when the last guard goes.
asio::awaitable<void> add_interest(colock::lock_scope& request) {
    auto account = co_await request.co_lock("account:42"); // held already: no Redis command
    co_return; // ... read and write the account, fenced by account.fence() ...
}

asio::awaitable<std::size_t> month_end(colock::locker& locker) {
    colock::lock_scope request{locker};
    auto account = co_await request.co_lock("account:42"); // takes the lock
    co_await add_interest(request);
    co_return account.hold_count(); // 1 again: add_interest's guard is gone
}
//]

// Stands for work that may be skipped when another process is doing it.
asio::awaitable<void> rebuild_cache() {
    co_return;
}

asio::awaitable<bool> try_lock(colock::locker& locker) {
    bool rebuilt = false;
    //[guide_try_lock
    //+ #include <colock/locker.hpp>
    //+
    //+ #include <optional>
    //+
    // One attempt: an empty optional when someone else holds the lock.
    if (std::optional<colock::lock_guard> guard = co_await locker.co_try_lock("cache:rebuild")) {
        co_await rebuild_cache();
        //<-
        rebuilt = true;
        //->
        co_await guard->release();
    }
    //]
    co_return rebuilt;
}

asio::awaitable<std::int64_t> nightly_report(colock::locker& locker) {
    //[options_nightly_report
    //+ #include <colock/lock_options.hpp>
    //+ #include <colock/locker.hpp>
    //+
    //+ #include <chrono>
    //+
    // A nightly report: one process makes it; the others give up after 10 s.
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{60};          // a crashed holder keeps the lock 60 s at most
    opt.wait_timeout = std::chrono::seconds{10}; // then co_lock throws error::timeout
    opt.max_hold = std::chrono::hours{1};        // renewal stops after an hour: the lease runs out
    auto guard = co_await locker.co_lock("report:nightly", opt);
    //]
    auto const fence = guard.fence();
    co_await guard.release();
    co_return fence;
}

//[observability_metrics
//+ #include <colock/lock_observer.hpp>
//+ #include <colock/locker.hpp>
//+
//+ #include <atomic>
//+ #include <chrono>
//+ #include <cstdint>
//+ #include <memory>
//+
// Counts for a metrics endpoint. Called on the locker's strand: it only adds.
struct lock_metrics final : colock::lock_observer {
    std::atomic<std::uint64_t> acquired{0}, handed_locally{0}, lost{0}, renewal_errors{0};
    std::atomic<std::int64_t> waited_us{0};

    void on_acquired(colock::acquired_event const& e) override {
        ++acquired;
        if (e.how == colock::acquired_by::local_handoff)
            ++handed_locally;
        waited_us += std::chrono::duration_cast<std::chrono::microseconds>(e.waited).count();
    }
    void on_lost(colock::lost_event const&) override { ++lost; }
    void on_renewal(colock::renewal_event const& e) override {
        if (e.error)
            ++renewal_errors;
    }
};

std::shared_ptr<lock_metrics> watch(colock::locker& locker) {
    auto metrics = std::make_shared<lock_metrics>();
    locker.set_observer(metrics); // the locker keeps it alive while installed
    return metrics;
}
//]

//[observability_status
//+ #include <colock/lock_status.hpp>
//+ #include <colock/locker.hpp>
//+
//+ #include <fmt/format.h>
//+
//+ #include <string>
//+
// Who holds `name`, for a log line or an operator's page.
asio::awaitable<std::string> who_holds(colock::locker& locker, std::string name) {
    colock::lock_status const st = co_await locker.co_status(name);
    if (!st.held())
        co_return fmt::format("{} is {} (last fence {})", name, colock::to_string(st.state),
                              st.fence);
    std::string who = st.holder ? fmt::format("pid {} on {} ({})", st.holder->pid, st.holder->host,
                                              st.holder->client_name)
                                : "locker " + st.holder_id;
    co_return fmt::format("{} is held by {}, fence {}, {} ms left, {} processes queued", name, who,
                          st.fence, st.ttl.count(), st.queued);
}
//]

void check(bool ok, char const* what) {
    if (!ok)
        throw std::runtime_error(std::string("readme snippets: ") + what);
}

void sentinel_configs() {
    //[deployments_sentinel
    //+ #include <colock/redis/config.hpp>
    //+
    // The sentinels and the name they monitor the primary under. User and password are the data
    // nodes'; the sentinels' own password goes in the query.
    auto const from_url = colock::redis::config::from_url(
        "redis-sentinel://app:data-secret@10.0.0.1:26379,10.0.0.2,10.0.0.3/mymaster"
        "?sentinel_password=sentinel-secret");

    colock::redis::config by_fields; // the same, field by field
    by_fields.sentinel.sentinels = {{"10.0.0.1", 26379}, {"10.0.0.2", 26379}, {"10.0.0.3", 26379}};
    by_fields.sentinel.master_name = "mymaster";
    by_fields.sentinel.password = "sentinel-secret";
    by_fields.username = "app";
    by_fields.password = "data-secret";
    //]
    check(from_url.sentinel.sentinels == by_fields.sentinel.sentinels &&
              from_url.sentinel.master_name == by_fields.sentinel.master_name &&
              from_url.sentinel.password == by_fields.sentinel.password &&
              from_url.username == by_fields.username && from_url.password == by_fields.password,
          "the sentinel URL and the fields say the same");
}

void cluster_configs() {
    //[deployments_cluster
    //+ #include <colock/redis/config.hpp>
    //+
    // Any nodes of the cluster; the connection finds the rest (CLUSTER SLOTS).
    auto const from_url = colock::redis::config::from_url(
        "redis-cluster://app:data-secret@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000");

    colock::redis::config by_fields; // the same, field by field
    by_fields.cluster.seeds = {{"10.0.0.1", 7000}, {"10.0.0.2", 7000}, {"10.0.0.3", 7000}};
    by_fields.username = "app";
    by_fields.password = "data-secret";
    //]
    check(from_url.cluster.seeds == by_fields.cluster.seeds &&
              from_url.username == by_fields.username && from_url.password == by_fields.password,
          "the cluster URL and the fields say the same");
}

asio::awaitable<void> other_snippets(colock::redis::config cfg) {
    sentinel_configs();
    cluster_configs();
    colock::redis::connection conn{co_await asio::this_coro::executor, cfg};
    colock::locker locker{conn};
    auto const metrics = watch(locker);

    // Fencing: two holders one after the other; a late write with the first fence is refused.
    invoice_store store;
    auto const first = co_await fencing(locker, store, "first");
    auto const second = co_await fencing(locker, store, "second");
    check(second > first, "fences increase");
    bool late_refused = false;
    try {
        co_await store.write(first, "late");
    } catch (std::runtime_error const&) {
        late_refused = true;
    }
    check(late_refused && store.refused == 1 && store.content == "second",
          "the store refuses the earlier holder's late write");

    // Not reentrant: taken once, passed down; afterwards the lock is free again.
    co_await close_account(locker);
    std::optional<colock::lock_guard> again = co_await locker.co_try_lock("account:42");
    check(again.has_value(), "close_account released the lock");
    co_await again->release();
    // Two fencing holders, close_account's and this one.
    check(metrics->acquired == 4 && metrics->lost == 0, "the observer counted the acquisitions");
    // Work under the lock in one call: its result, and the lock free afterwards.
    check(co_await charge(locker) > 0, "co_with_lock returned the work's result");
    std::optional<colock::lock_guard> after_charge = co_await locker.co_try_lock("account:42");
    check(after_charge.has_value(), "co_with_lock released the lock");
    co_await after_charge->release();

    // An election: a term, then nobody leads; who_leads says so.
    co_await schedule(locker);
    check(last_term > 0, "the scheduler led with a term");
    check(co_await who_leads(locker) == "nobody leads; watching, nobody leads",
          "nobody leads after the resign");

    // A semaphore of 4: six exports on two lockers, never more than 4 at once; a bulk job that
    // takes 3 of them at once; a user with another capacity refused, naming both.
    {
        colock::redis::connection conn2{co_await asio::this_coro::executor, cfg};
        co_await conn2.async_connect();
        colock::locker locker2{conn2};
        auto const ex = co_await asio::this_coro::executor;
        std::vector<decltype(asio::co_spawn(ex, export_report(locker), asio::deferred))> six;
        for (int i = 0; i < 6; ++i)
            six.push_back(
                asio::co_spawn(ex, export_report(i % 2 == 0 ? locker : locker2), asio::deferred));
        auto [order, failures] =
            co_await asio::experimental::make_parallel_group(std::move(six))
                .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
        for (auto const& f : failures)
            if (f)
                std::rethrow_exception(f);
        check(exports_done == 6 && exports_peak >= 1 && exports_peak <= 4,
              "six exports, at most 4 at once");
        check(co_await bulk_export(locker2) == std::optional<std::size_t>{1},
              "the bulk job held 3 of the 4 permits");
        auto const refused = co_await wrong_capacity(locker);
        check(refused.find("semaphore 'exports' has capacity 4 at the server, not 8") !=
                  std::string::npos,
              "another capacity is refused, naming both");
        colock::semaphore exports{locker, "exports", 4};
        check(co_await exports.co_available() == 4, "every permit came back");
        conn2.close();
    }

    // A read-write lock: the rebuild's version is what a reader sees next.
    auto const version = co_await rebuild_catalog(locker);
    check(version > 0, "the writer had a fence");
    check(co_await read_catalog(locker) == fmt::format("catalog version {}", version),
          "the reader carries its writer's fence");

    // Re-entry through a scope: one lease, given back with the scope's last guard.
    check(co_await month_end(locker) == 1, "the scope's guards shared one lease");
    std::optional<colock::lock_guard> after_scope = co_await locker.co_try_lock("account:42");
    check(after_scope.has_value(), "the scope's last guard released the lock");
    co_await after_scope->release();

    // One attempt on a free name, and a lock taken with options.
    check(co_await try_lock(locker), "co_try_lock got a free lock");
    check(co_await nightly_report(locker) > 0, "co_lock with options got the lock");

    // Status: free, then held by this very process.
    auto const free_line = co_await who_holds(locker, "report:daily");
    check(free_line.starts_with("report:daily is free"), "status of a free lock");
    auto report = co_await locker.co_lock("report:daily");
    auto const held_line = co_await who_holds(locker, "report:daily");
    check(held_line.find(fmt::format("pid {} on ", ::getpid())) != std::string::npos,
          "status names the holder's pid");
    //[observability_force_unlock
    //+ #include <colock/locker.hpp>
    //+
    // The last resort, from another process: the holder is told at once.
    bool const ended = co_await locker.co_force_unlock("report:daily");
    //]
    check(ended, "the forced unlock ended the lease");
    co_await report.wait_lost();
    check(report.lost(), "the holder was told of the forced unlock");
    co_await report.release();

    // Two names at once: the second set's fence of each name is above the first's.
    auto const set_first = co_await transfer(locker);
    auto const set_second = co_await transfer(locker);
    check(set_second > set_first, "a lock set's fences rise per name");

    // Fencing at the resource: two holders write; a late write under the first fence is refused.
    auto const job_first = co_await finish_job(conn, locker);
    auto const job_second = co_await finish_job(conn, locker);
    colock::fenced_resource job{conn, "job:{42}:fence"};
    auto [late, late_result] = co_await job.async_write(
        "job:42", job_first, colock::fenced_writes{}.hset("job:{42}", "state", "late"),
        asio::as_tuple(asio::use_awaitable));
    check(job_second > job_first && late == colock::error::stale_fence,
          "the fenced resource refuses the earlier holder's late write");
    colock::resp3::request cleanup;
    cleanup.push("DEL", "job:{42}", "job:{42}:fence");
    co_await conn.co_exec(std::move(cleanup));
    conn.close();
}

} // namespace

int run_other_snippets(colock::redis::config const& cfg) {
    asio::io_context io;
    asio::co_spawn(io, other_snippets(cfg), [](std::exception_ptr e) {
        if (e)
            std::rethrow_exception(e);
    });
    try {
        io.run();
    } catch (std::exception const& e) {
        std::cerr << "readme snippets: " << e.what() << "\n";
        return 1;
    }
    std::cout << "readme snippets: the documentation's snippets: ok\n";
    return 0;
}
