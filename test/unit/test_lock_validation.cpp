// validate(name, lock_options) field by field at its boundaries: the last value accepted and the
// first refused, the fields that matter only beside another, and the words of each refusal.
#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

namespace lock_validation_test {

using colock::lock_options;
using colock::max_lock_ttl;
using namespace std::chrono_literals;

// The message of the refusal, or "accepted"; a refusal is always invalid_argument.
std::string verdict(std::string_view name, lock_options const& opt) {
    try {
        colock::validate(name, opt);
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == colock::error::invalid_argument);
        CHECK(std::string(e.what()).starts_with("colock: "));
        return e.what();
    }
    return "accepted";
}

bool says(std::string const& message, std::string const& words) {
    INFO(message);
    return message.find(words) != std::string::npos;
}

TEST_CASE("lock validation: a renew interval just below the ttl is accepted, just above it is "
          "refused with both values") {
    lock_options opt;
    opt.ttl = 1000ms;
    opt.renew_interval = 999ms;
    CHECK(verdict("n", opt) == "accepted");
    opt.renew_interval = 1001ms;
    CHECK(says(verdict("n", opt),
               "lock_options.renew_interval (1001 ms) must be below ttl (1000 ms)"));
    opt.renew_interval = -3ms;
    CHECK(says(verdict("n", opt), "lock_options.renew_interval must be positive (got -3 ms)"));
}

TEST_CASE("lock validation: 3 ms is the shortest ttl that renews by itself; a renew interval "
          "given rescues a shorter one") {
    lock_options opt;
    opt.ttl = 3ms;
    CHECK(verdict("n", opt) == "accepted");
    CHECK(opt.effective_renew_interval() == 1ms);
    opt.ttl = 2ms;
    CHECK(says(verdict("n", opt), "lock_options.ttl (2 ms) is too short to renew"));
    opt.renew_interval = 1ms;
    CHECK(verdict("n", opt) == "accepted");
    opt.ttl = 1ms; // nothing below 1 ms remains for the interval
    CHECK(says(verdict("n", opt), "must be below ttl (1 ms)"));
}

TEST_CASE("lock validation: the ttl's refusals give the value") {
    lock_options opt;
    opt.ttl = 0ms;
    CHECK(says(verdict("n", opt), "lock_options.ttl must be positive (got 0 ms)"));
    opt.ttl = max_lock_ttl + 1ms;
    CHECK(says(verdict("n", opt), std::to_string(max_lock_ttl.count() + 1) + " ms"));
}

TEST_CASE("lock validation: retain from 0 to max_lock_ttl, and only with auto_renew") {
    lock_options opt;
    opt.retain = max_lock_ttl;
    CHECK(verdict("n", opt) == "accepted");
    opt.retain = max_lock_ttl + 1ms;
    CHECK(says(verdict("n", opt), "lock_options.retain must be between 0 and max_lock_ttl"));
    opt.retain = -1ms;
    CHECK(says(verdict("n", opt), "got -1 ms"));
    opt.retain = 1ms;
    opt.auto_renew = false;
    CHECK(says(verdict("n", opt), "lock_options.retain needs auto_renew"));
    opt.retain = 0ms; // nothing kept: auto_renew does not matter
    CHECK(verdict("n", opt) == "accepted");
}

TEST_CASE("lock validation: up to a million replicas may be awaited, not one more") {
    lock_options opt;
    opt.wait_replicas = 1'000'000;
    CHECK(verdict("n", opt) == "accepted");
    opt.wait_replicas = 1'000'001;
    CHECK(says(verdict("n", opt), "lock_options.wait_replicas (1000001) is not a number of "
                                  "replicas"));
    // A count that wrapped from a negative number is refused the same way.
    opt.wait_replicas = std::numeric_limits<std::size_t>::max();
    CHECK(says(verdict("n", opt), "lock_options.wait_replicas"));
}

TEST_CASE("lock validation: the replicas' timeout is bounded by max_lock_ttl, and only while "
          "replicas are awaited") {
    lock_options opt;
    opt.wait_replicas = 2;
    opt.replicas_timeout = max_lock_ttl;
    CHECK(verdict("n", opt) == "accepted");
    opt.replicas_timeout = max_lock_ttl + 1ms;
    CHECK(says(verdict("n", opt), "lock_options.replicas_timeout must be positive and at most "
                                  "max_lock_ttl"));
    opt.wait_replicas = 0;
    opt.replicas_timeout = std::chrono::milliseconds::max();
    CHECK(verdict("n", opt) == "accepted");
}

TEST_CASE("lock validation: first_connect_timeout may be 0, not negative") {
    lock_options opt;
    opt.first_connect_timeout = 0ms;
    CHECK(verdict("n", opt) == "accepted");
    opt.first_connect_timeout = -1ms;
    CHECK(says(verdict("n", opt),
               "lock_options.first_connect_timeout must not be negative (got -1 ms)"));
}

TEST_CASE("lock validation: wait_timeout and max_hold may be 0; their refusals give the value") {
    lock_options opt;
    opt.wait_timeout = 0ms;
    opt.max_hold = 0ms;
    CHECK(verdict("n", opt) == "accepted");
    opt.max_hold = -7ms;
    CHECK(says(verdict("n", opt), "lock_options.max_hold must not be negative (got -7 ms)"));
    opt.max_hold.reset();
    opt.wait_timeout = -9ms;
    CHECK(says(verdict("n", opt), "lock_options.wait_timeout must not be negative (got -9 ms)"));
}

TEST_CASE("lock validation: a retry multiplier of exactly 1 is accepted; NaN and infinity are "
          "not") {
    lock_options opt;
    opt.retry.multiplier = 1.0;
    CHECK(verdict("n", opt) == "accepted");
    opt.retry.multiplier = std::nan("");
    CHECK(says(verdict("n", opt), "lock_options.retry.multiplier must be a finite number >= 1"));
    opt.retry.multiplier = std::numeric_limits<double>::infinity();
    CHECK(says(verdict("n", opt), "lock_options.retry.multiplier"));
    opt.retry.multiplier = std::nextafter(1.0, 0.0);
    CHECK(says(verdict("n", opt), "lock_options.retry.multiplier"));
}

TEST_CASE("lock validation: retry.max may equal retry.initial; a negative initial is refused") {
    lock_options opt;
    opt.retry.initial = 7ms;
    opt.retry.max = 7ms;
    CHECK(verdict("n", opt) == "accepted");
    opt.retry.max = 6ms;
    CHECK(says(verdict("n", opt), "lock_options.retry.max must not be below retry.initial"));
    opt.retry.initial = -1ms;
    opt.retry.max = 10ms;
    CHECK(says(verdict("n", opt), "lock_options.retry.initial must be positive"));
}

TEST_CASE("lock validation: a name is measured in bytes, and its fault is named before an "
          "option's") {
    std::string utf8;
    for (std::size_t i = 0; i < colock::max_lock_name_length / 2; ++i)
        utf8 += "\xc3\xa9"; // é: two bytes
    CHECK(verdict(utf8, {}) == "accepted");
    CHECK(says(verdict(utf8 + "x", {}), "lock name is 1025 bytes, over the limit of 1024"));
    lock_options bad;
    bad.ttl = 0ms;
    CHECK(says(verdict("", bad), "lock name is empty"));
    CHECK(says(verdict("n", bad), "lock_options.ttl"));
}

TEST_CASE("lock validation: a name may hold spaces, braces inside, a NUL and any byte") {
    for (std::string const& name :
         {std::string("a b"), std::string("a{b}c"), std::string("nul\0in", 6),
          std::string("\xff\xfe"), std::string(1, ' ')}) {
        CAPTURE(name);
        CHECK(verdict(name, {}) == "accepted");
    }
}

TEST_CASE("lock validation: the renew interval in effect is a third of the ttl, rounded down, "
          "unless one is given") {
    lock_options opt;
    opt.ttl = 1000ms;
    CHECK(opt.effective_renew_interval() == 333ms);
    opt.ttl = 30'000ms;
    CHECK(opt.effective_renew_interval() == 10'000ms);
    opt.renew_interval = 29'999ms; // longer than a third: still what was asked for
    CHECK(opt.effective_renew_interval() == 29'999ms);
}

TEST_CASE("lock validation: a passing server error is told by its whole first word") {
    CHECK(colock::is_transient_server_error("LOADING"));
    CHECK(colock::is_transient_server_error("CLUSTERDOWN"));
    CHECK_FALSE(colock::is_transient_server_error("TRYAGAINX later"));
    CHECK_FALSE(colock::is_transient_server_error("LOADIN later"));
    CHECK_FALSE(colock::is_transient_server_error(" LOADING")); // the first word is empty
    CHECK_FALSE(colock::is_transient_server_error("ERR BUSY"));
}

} // namespace lock_validation_test
