// A fenced resource against a real server: writes under a holder's fence applied, and the late
// write of a holder whose lease ran out refused once the next holder wrote, naming both fences;
// a batch applied whole or not at all (a key of another type, a value that is not an integer, a
// sum out of range refuse it, nothing written); a fence of another name refused; the record's
// expiry; every kind of holding; the arguments refused before any I/O; a resource destroyed
// with a write pending.
#include <colock/election.hpp>
#include <colock/fenced_resource.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/failures.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

using namespace colock;
using namespace colock::test;

namespace {

// The keys of one test's resource: the fence key and two data keys in its slot.
struct resource_keys {
    explicit resource_keys(std::string const& name)
        : fence("res:{" + name + "}:fence")
        , value("res:{" + name + "}")
        , fields("res:{" + name + "}:fields") {}
    std::string fence, value, fields;
};

asio::awaitable<std::string> type_of(redis::connection& c, std::string const& key) {
    auto r = co_await c.co_exec(command("TYPE", key));
    co_return std::string(r.at(0).as_string().value_or("?"));
}

asio::awaitable<std::optional<std::string>> hget(redis::connection& c, std::string const& key,
                                                 std::string const& field) {
    auto r = co_await c.co_exec(command("HGET", key, field));
    if (r.at(0).is_null())
        co_return std::nullopt;
    co_return std::string(r.at(0).as_string().value_or("?"));
}

} // namespace

TEST_CASE("fenced resource: the next holder's write moves the fence, and the late write of a "
          "holder whose lease ran out is refused, naming both fences, with nothing written") {
    run_lock_test<two_lockers>(
        "fenced-stale",
        [](redis::connection& conn_a, redis::connection&, redis::connection& probe, locker& a,
           locker& b, std::string const& name) -> asio::awaitable<void> {
            resource_keys const keys{name};
            fenced_resource res{conn_a, keys.fence};
            CHECK(res.fence_key() == keys.fence);
            CHECK_FALSE((co_await res.co_read()).has_value());

            // Holder 1 writes, then its lease runs out unnoticed (a pause): its key is gone.
            auto first = co_await a.co_lock(name, lease(10'000ms));
            auto const fence1 = first.fence();
            auto w1 = co_await res.co_write(first, fenced_writes{}.set(keys.value, "one"));
            CHECK(w1.fence == fence1);
            CHECK(w1.previous_fence == 0);
            REQUIRE(w1.replies.size() == 1);
            CHECK(w1.replies[0].as_string() == "OK");
            auto const record = co_await res.co_read();
            REQUIRE(record.has_value());
            CHECK(record->fence == fence1);
            CHECK(record->name == name);
            // A second write under the same fence is taken (one holder writes many times).
            co_await res.co_write(first, fenced_writes{}.set(keys.value, "one again"));
            CHECK(co_await integer(probe, command("DEL", lock_key(name))) == 1);

            // Holder 2 takes the lock and writes.
            fenced_resource res_b{conn_a, keys.fence};
            auto second = co_await b.co_lock(name, lease(10'000ms));
            CHECK(second.fence() > fence1);
            auto w2 = co_await res_b.co_write(second, fenced_writes{}.set(keys.value, "two"));
            CHECK(w2.previous_fence == fence1);

            // Holder 1 resumes: its write, under its old fence, is refused.
            auto const late = co_await failure_of(res.co_write(
                name, fence1, fenced_writes{}.set(keys.value, "late").del(keys.fields)));
            CHECK(late.code == colock::error::stale_fence);
            CAPTURE(late.what);
            CHECK(late.what.find(std::to_string(fence1)) != std::string::npos);
            CHECK(late.what.find(std::to_string(second.fence())) != std::string::npos);
            CHECK(late.what.find(keys.fence) != std::string::npos);
            CHECK(co_await get(probe, keys.value) == "two");
            CHECK((co_await res.co_read())->fence == second.fence());

            // The async form says the same by its code.
            auto [ec, result] = co_await res.async_write(
                name, fence1, fenced_writes{}.set(keys.value, "late"), as_tuple);
            CHECK(ec == colock::error::stale_fence);
            CHECK(result.replies.empty());
            CHECK(co_await get(probe, keys.value) == "two");

            // A fence of another name is refused too: fences of two names do not compare.
            auto const other = co_await failure_of(res.co_write(
                name + "-other", second.fence() + 1000, fenced_writes{}.set(keys.value, "x")));
            CHECK(other.code == colock::error::invalid_argument);
            CHECK(other.what.find(name + "-other") != std::string::npos);
            CHECK(co_await get(probe, keys.value) == "two");

            // The record keeps no expiry by default; the data keys are the user's.
            CHECK(co_await integer(probe, command("PTTL", keys.fence)) == -1);
            co_await second.release();
            co_await integer(probe, command("DEL", keys.fence, keys.value));
        });
}

TEST_CASE("fenced resource: a batch is applied in order with each write's reply, or, when one "
          "write cannot be made, not at all, the error naming the key") {
    run_lock_test<one_locker>(
        "fenced-batch",
        [](redis::connection& conn, redis::connection& probe, locker&,
           std::string const& name) -> asio::awaitable<void> {
            resource_keys const keys{name};
            std::string const counter = "res:{" + name + "}:n";
            std::string const gone = "res:{" + name + "}:gone";
            fenced_resource res{conn, keys.fence};
            co_await integer(probe, command("SET", gone, "x"));

            auto const w = co_await res.co_write(name, 10,
                                                 fenced_writes{}
                                                     .set(keys.value, "v", 60'000ms)
                                                     .hset(keys.fields, "state", "running")
                                                     .hincr_by(keys.fields, "attempts", 2)
                                                     .incr_by(counter, -5)
                                                     .hdel(keys.fields, "missing")
                                                     .del(gone)
                                                     .expire(keys.fields, 30'000ms));
            REQUIRE(w.replies.size() == 7);
            CHECK(w.replies[0].as_string() == "OK");
            CHECK(w.replies[1].as_integer() == 1);
            CHECK(w.replies[2].as_integer() == 2);
            CHECK(w.replies[3].as_integer() == -5);
            CHECK(w.replies[4].as_integer() == 0);
            CHECK(w.replies[5].as_integer() == 1);
            CHECK(w.replies[6].as_integer() == 1);
            CHECK(co_await get(probe, keys.value) == "v");
            auto const pttl = co_await integer(probe, command("PTTL", keys.value));
            CHECK(pttl > 50'000);
            CHECK(pttl <= 60'000);
            CHECK(co_await integer(probe, command("PTTL", keys.fields)) > 20'000);
            CHECK(co_await hget(probe, keys.fields, "state") == "running");
            CHECK(co_await get(probe, counter) == "-5");
            CHECK(co_await integer(probe, command("EXISTS", gone)) == 0);
            CHECK(w.previous_fence == 0);

            // Each refusal below comes after a write that would have been made: none is.
            auto const refused = [&](fenced_writes batch) -> asio::awaitable<failure> {
                auto f = co_await failure_of(res.co_write(name, 11, std::move(batch)));
                CHECK(co_await get(probe, keys.value) == "v");
                CHECK(co_await hget(probe, keys.fields, "state") == "running");
                CHECK((co_await res.co_read())->fence == 10);
                co_return f;
            };
            // A hash write to a string.
            auto f = co_await refused(fenced_writes{}.set(keys.value, "w").hset(counter, "f", "v"));
            CHECK(f.code == redis::error::server_error);
            CAPTURE(f.what);
            CHECK(f.what.find(counter) != std::string::npos);
            CHECK(f.what.find("nothing was written") != std::string::npos);
            CHECK(co_await type_of(probe, counter) == "string");
            // An increment of a string that is no integer, and of a hash field that is none.
            co_await integer(probe, command("SET", gone, "twelve"));
            f = co_await refused(
                fenced_writes{}.hset(keys.fields, "state", "done").incr_by(gone, 1));
            CHECK(f.code == redis::error::server_error);
            CHECK(f.what.find("twelve") != std::string::npos);
            f = co_await refused(
                fenced_writes{}.set(keys.value, "w").hincr_by(keys.fields, "state", 1));
            CHECK(f.code == redis::error::server_error);
            // A sum out of 64 bits, either way.
            co_await integer(probe, command("SET", gone, "9223372036854775800"));
            f = co_await refused(fenced_writes{}.set(keys.value, "w").incr_by(gone, 8));
            CHECK(f.code == redis::error::server_error);
            CHECK(f.what.find("overflow") != std::string::npos);
            co_await integer(probe, command("SET", gone, "-9223372036854775800"));
            f = co_await refused(fenced_writes{}.set(keys.value, "w").incr_by(gone, -9));
            CHECK(f.code == redis::error::server_error);
            // At the edge it fits.
            auto const edge = co_await res.co_write(name, 11, fenced_writes{}.incr_by(gone, -8));
            CHECK(edge.replies.at(0).as_integer() == std::numeric_limits<std::int64_t>::min());
            // A garbled record is named, not taken for no record.
            co_await integer(probe, command("SET", keys.fence, "seven"));
            f = co_await failure_of(res.co_write(name, 12, fenced_writes{}.set(keys.value, "w")));
            CHECK(f.code == redis::error::server_error);
            CHECK(f.what.find(keys.fence) != std::string::npos);
            CHECK(f.what.find("seven") != std::string::npos);
            CHECK(co_await get(probe, keys.value) == "v");
            f = co_await failure_of(res.co_read());
            CHECK(f.code == colock::error::unexpected_reply);
            co_await integer(probe,
                             command("DEL", keys.fence, keys.value, keys.fields, counter, gone));
        });
}

TEST_CASE("fenced resource: bad arguments are refused before any I/O, naming what is wrong") {
    run_lock_test<one_locker>(
        "fenced-args",
        [](redis::connection& conn, redis::connection& probe, locker&,
           std::string const& name) -> asio::awaitable<void> {
            resource_keys const keys{name};
            auto const refusal = [](auto make) {
                auto const f = call_failure(make);
                CHECK(f.code == colock::error::invalid_argument);
                return f.what;
            };
            CHECK(refusal([&] {
                      fenced_resource r{conn, ""};
                  }).find("empty fence key") != std::string::npos);
            fenced_resource_options zero;
            zero.record_ttl = 0ms;
            CHECK(refusal([&] {
                      fenced_resource r{conn, keys.fence, zero};
                  }).find("record_ttl") != std::string::npos);
            CHECK(refusal([] { fenced_writes{}.set("", "v"); }).find("empty key") !=
                  std::string::npos);
            CHECK(refusal([&] { fenced_writes{}.set(keys.value, "v", 0ms); }).find("ttl") !=
                  std::string::npos);
            // Redis would refuse an expiry this far out only after the writes before it.
            CHECK(refusal([&] {
                      fenced_writes{}
                          .set(keys.value, "v")
                          .expire(keys.fields, std::chrono::milliseconds::max());
                  }).find("2^40") != std::string::npos);
            fenced_resource_options far;
            far.record_ttl = std::chrono::milliseconds::max();
            CHECK(refusal([&] {
                      fenced_resource r{conn, keys.fence, far};
                  }).find("record_ttl") != std::string::npos);
            CHECK(refusal([&] {
                      fenced_writes{}.set(keys.value, "v").hset(keys.value, "f", "v");
                  }).find("as a string") != std::string::npos);
            CHECK(refusal([&] {
                      fenced_writes{}.set(keys.value, "v").incr_by(keys.value, 1);
                  }).find("an increment goes first") != std::string::npos);
            CHECK(refusal([&] {
                      fenced_writes{}.hset(keys.fields, "f", "v").hincr_by(keys.fields, "f", 1);
                  }).find("field 'f'") != std::string::npos);
            // Another field of the same hash, and a key deleted after its increment, are fine.
            fenced_writes ok;
            ok.hset(keys.fields, "f", "v").hincr_by(keys.fields, "g", 1).incr_by(keys.value, 1);
            ok.del(keys.value);
            CHECK(ok.size() == 4);
            CHECK(ok.keys().size() == 2);

            fenced_resource res{conn, keys.fence};
            auto f = co_await failure_of(
                res.co_write(name, 1, fenced_writes{}.set("elsewhere:" + name, "v")));
            CHECK(f.code == colock::error::invalid_argument);
            CHECK(f.what.find("hash slot") != std::string::npos);
            f = co_await failure_of(res.co_write(name, 1, fenced_writes{}.set(keys.fence, "v")));
            CHECK(f.code == colock::error::invalid_argument);
            f = co_await failure_of(res.co_write(name, 0, fenced_writes{}.set(keys.value, "v")));
            CHECK(f.code == colock::error::invalid_argument);
            f = co_await failure_of(res.co_write("", 1, fenced_writes{}.set(keys.value, "v")));
            CHECK(f.code == colock::error::invalid_argument);
            CHECK(co_await integer(probe, command("EXISTS", keys.fence, keys.value)) == 0);
        });
}

TEST_CASE("fenced resource: a permit, a write guard and a leadership write under their fences; "
          "a released or lost holding is refused before anything is sent; the record's expiry "
          "when asked for") {
    run_lock_test<one_locker>(
        "fenced-holdings",
        [](redis::connection& conn, redis::connection& probe, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            fenced_resource_options opt;
            opt.record_ttl = 30'000ms;
            std::string const sem_name = name + "-sem";
            resource_keys const sem_keys{sem_name};
            fenced_resource res{conn, sem_keys.fence, opt};
            semaphore sem{locks, sem_name, 2};
            auto p = co_await sem.co_acquire(lease(10'000ms));
            auto w = co_await res.co_write(p, fenced_writes{}.incr_by(sem_keys.value, 1));
            CHECK(w.fence == p.fence());
            CHECK(w.replies.at(0).as_integer() == 1);
            auto const record_ttl = co_await integer(probe, command("PTTL", sem_keys.fence));
            CHECK(record_ttl > 20'000);
            CHECK(record_ttl <= 30'000);
            co_await p.release();
            auto f =
                co_await failure_of(res.co_write(p, fenced_writes{}.incr_by(sem_keys.value, 1)));
            CHECK(f.code == colock::error::not_held);
            CHECK(f.what.find(sem_name) != std::string::npos);

            std::string const rw_name = name + "-rw";
            resource_keys const rw_keys{rw_name};
            fenced_resource rw_res{conn, rw_keys.fence};
            rw_lock rw{locks, rw_name};
            auto writer = co_await rw.co_lock(lease(10'000ms));
            CHECK(
                (co_await rw_res.co_write(writer, fenced_writes{}.set(rw_keys.value, "w"))).fence ==
                writer.fence());
            co_await writer.release();

            std::string const el_name = name + "-el";
            resource_keys const el_keys{el_name};
            fenced_resource el_res{conn, el_keys.fence};
            election el{locks, el_name};
            auto lead = co_await el.co_campaign("me", lease(10'000ms));
            CHECK((co_await el_res.co_write(lead, fenced_writes{}.set(el_keys.value, "l"))).fence ==
                  lead.term());
            CHECK((co_await el_res.co_read())->name == el_name);

            // A lock whose lease is lost (its key deleted; the renewal finds it gone).
            resource_keys const keys{name};
            fenced_resource lock_res{conn, keys.fence};
            auto guard = co_await locks.co_lock(name, lease(900ms));
            co_await integer(probe, command("DEL", lock_key(name)));
            co_await guard.wait_lost();
            f = co_await failure_of(lock_res.co_write(guard, fenced_writes{}.set(keys.value, "x")));
            CHECK(f.code == colock::error::lock_lost);
            CHECK(co_await integer(probe, command("EXISTS", keys.fence, keys.value)) == 0);
            co_await lead.release();
            co_await integer(probe, command("DEL", sem_keys.fence, sem_keys.value, rw_keys.fence,
                                            rw_keys.value, el_keys.fence, el_keys.value));
        });
}

TEST_CASE("fenced resource: destroyed with a write pending, the write completes with "
          "operation_aborted") {
    run_lock_test<one_locker>(
        "fenced-destroyed",
        [](redis::connection& conn, redis::connection& probe, locker&,
           std::string const& name) -> asio::awaitable<void> {
            resource_keys const keys{name};
            // The server holds every write for a while: the request is sent, its reply late.
            co_await probe.co_exec(command("CLIENT", "PAUSE", "400", "WRITE"));
            std::optional<error_code> done;
            {
                fenced_resource res{conn, keys.fence};
                res.async_write(name, 1, fenced_writes{}.set(keys.value, "v"),
                                [&done](error_code ec, fenced_result) { done = ec; });
                co_await sleep_for(50ms);
                CHECK_FALSE(done.has_value());
            }
            CHECK(co_await eventually([&] { return done.has_value(); }));
            CHECK(done == asio::error::operation_aborted);
            co_await probe.co_exec(command("CLIENT", "UNPAUSE"));
            co_await integer(probe, command("DEL", keys.fence, keys.value));
        });
}

TEST_CASE("fenced resource: called by SHA where Functions are off, and loaded again after the "
          "server forgot the scripts and functions") {
    for (bool const functions : {true, false}) {
        CAPTURE(functions);
        auto cfg = shared_server().config();
        cfg.use_functions = functions;
        run_lock_test<one_locker>(
            cfg, "fenced-forms",
            [functions](redis::connection& conn, redis::connection& probe, locker&,
                        std::string const& name) -> asio::awaitable<void> {
                resource_keys const keys{name};
                fenced_resource res{conn, keys.fence};
                auto const stats = [&]() -> asio::awaitable<std::string> {
                    auto r = co_await probe.co_exec(command("INFO", "commandstats"));
                    co_return std::string(r.at(0).as_string().value_or(""));
                };
                auto const before = co_await stats();
                co_await res.co_write(name, 5, fenced_writes{}.set(keys.value, "a"));
                auto const after = co_await stats();
                auto const by = functions ? "fcall" : "evalsha";
                CHECK(command_calls(after, by) > command_calls(before, by));
                CHECK(command_calls(after, "eval") == command_calls(before, "eval"));
                co_await probe.co_exec(command("SCRIPT", "FLUSH"));
                co_await probe.co_exec(command("FUNCTION", "FLUSH"));
                auto const w = co_await res.co_write(name, 6, fenced_writes{}.set(keys.value, "b"));
                CHECK(w.previous_fence == 5);
                CHECK(co_await get(probe, keys.value) == "b");
                auto const late = co_await failure_of(
                    res.co_write(name, 5, fenced_writes{}.set(keys.value, "late")));
                CHECK(late.code == colock::error::stale_fence);
                co_await integer(probe, command("DEL", keys.fence, keys.value));
            });
    }
}
