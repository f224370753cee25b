#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace colock;
using namespace std::chrono_literals;

namespace {
// The message of the refusal, or "accepted".
std::string refusal(std::string_view name, lock_options const& opt) {
    try {
        validate(name, opt);
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == colock::error::invalid_argument);
        return e.what();
    }
    return "accepted";
}
} // namespace

TEST_CASE("default options and ordinary names are accepted") {
    CHECK(refusal("job:refund:acct-42", {}) == "accepted");
    CHECK(refusal(std::string(max_lock_name_length, 'n'), {}) == "accepted");
    lock_options opt;
    CHECK(opt.effective_renew_interval() == opt.ttl / 3);
    opt.renew_interval = 5s;
    CHECK(opt.effective_renew_interval() == 5s);
}

TEST_CASE("bad names are refused with a message naming the fault") {
    CHECK(refusal("", {}).find("lock name is empty") != std::string::npos);
    CHECK(refusal(std::string(max_lock_name_length + 1, 'n'), {}).find("over the limit") !=
          std::string::npos);
}

TEST_CASE("bad options are refused with a message naming the field") {
    lock_options opt;
    opt.ttl = 0ms;
    CHECK(refusal("n", opt).find("lock_options.ttl") != std::string::npos);
    opt.ttl = -5ms;
    CHECK(refusal("n", opt).find("lock_options.ttl") != std::string::npos);

    opt = {};
    opt.ttl = 1000ms;
    opt.renew_interval = 1000ms;
    CHECK(refusal("n", opt).find("lock_options.renew_interval") != std::string::npos);
    opt.renew_interval = 0ms;
    CHECK(refusal("n", opt).find("lock_options.renew_interval") != std::string::npos);

    opt = {};
    opt.wait_replicas = 1;
    opt.replicas_timeout = 0ms;
    CHECK(refusal("n", opt).find("lock_options.replicas_timeout") != std::string::npos);
    opt.replicas_timeout = -1ms;
    CHECK(refusal("n", opt).find("lock_options.replicas_timeout") != std::string::npos);
    opt.wait_replicas = 0; // the timeout matters only when replicas are awaited
    CHECK_NOTHROW(validate("n", opt));

    opt = {};
    opt.ttl = 2ms; // ttl / 3 rounds to 0: nothing could renew it
    CHECK(refusal("n", opt).find("too short to renew") != std::string::npos);
    opt.auto_renew = false;
    CHECK(refusal("n", opt).find("too short to renew") != std::string::npos);

    opt = {};
    opt.wait_timeout = -1ms;
    CHECK(refusal("n", opt).find("lock_options.wait_timeout") != std::string::npos);
    opt.wait_timeout = 0ms; // zero: one attempt, then timeout
    CHECK(refusal("n", opt) == "accepted");

    opt = {};
    opt.max_hold = -1ms;
    CHECK(refusal("n", opt).find("lock_options.max_hold") != std::string::npos);

    opt = {};
    opt.retry.initial = 0ms;
    CHECK(refusal("n", opt).find("retry.initial") != std::string::npos);
    opt = {};
    opt.retry.max = 1ms;
    CHECK(refusal("n", opt).find("retry.max") != std::string::npos);
    opt = {};
    opt.retry.multiplier = 0.5;
    CHECK(refusal("n", opt).find("retry.multiplier") != std::string::npos);
}

TEST_CASE("the lock error category names its codes") {
    CHECK(make_error_code(colock::error::timeout).message().find("wait_timeout") !=
          std::string::npos);
    CHECK(make_error_code(colock::error::lock_lost).message().find("lost") != std::string::npos);
    CHECK(std::string(make_error_code(colock::error::not_held).category().name()) == "colock");
}

TEST_CASE("very long durations: ttl is bounded by max_lock_ttl, the waits accept any length") {
    lock_options opt;
    opt.ttl = max_lock_ttl;
    CHECK(refusal("n", opt) == "accepted");
    opt.ttl = max_lock_ttl + 1ms;
    CHECK(refusal("n", opt).find("max_lock_ttl") != std::string::npos);
    opt.ttl = std::chrono::milliseconds::max();
    CHECK(refusal("n", opt).find("max_lock_ttl") != std::string::npos);

    opt = {};
    opt.wait_timeout = std::chrono::milliseconds::max();
    opt.max_hold = std::chrono::milliseconds::max();
    opt.retry.initial = std::chrono::milliseconds::max();
    opt.retry.max = std::chrono::milliseconds::max();
    opt.retry.multiplier = 1e300;
    CHECK(refusal("n", opt) == "accepted");
}

TEST_CASE("transient server errors are told from refusals by their first word") {
    for (char const* text :
         {"LOADING Redis is loading the dataset in memory",
          "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
          "TRYAGAIN Multiple keys request during rehashing of slot",
          "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
          "READONLY You can't write against a read only replica.",
          "CLUSTERDOWN The cluster is down", "BUSY"}) {
        CAPTURE(text);
        CHECK(is_transient_server_error(text));
    }
    for (char const* text :
         {"BUSYKEY Target key name already exists.", "NOPERM this user has no permissions",
          "ERR unknown command", "NOSCRIPT No matching script", "WRONGTYPE Operation against a key",
          "OOM command not allowed when used memory > 'maxmemory'.", "", "loading lowercase",
          "MOVED 3999 127.0.0.1:6381"}) {
        CAPTURE(text);
        CHECK_FALSE(is_transient_server_error(text));
    }
}
