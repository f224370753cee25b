// What the acquisition machine's tests feed it: a call's options, the store's answers, and a
// driver that walks a call on virtual time. Shared by test_acquisition*.cpp.
#pragma once

#include "lock/core/acquisition.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/errc.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <random>
#include <string>

namespace acquisition_test {

using namespace colock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;
using std::chrono::milliseconds;

inline clock_type::time_point const t0 = clock_type::time_point{} + std::chrono::hours{1000};

// wait_timeout 10 s, first_connect_timeout 2 s, retry up to 1 s, a ttl of 30 s.
inline colock::lock_options options() {
    colock::lock_options opt;
    opt.wait_timeout = 10s;
    opt.first_connect_timeout = 2s;
    opt.retry.initial = 50ms;
    opt.retry.max = 1000ms;
    return opt;
}

inline colock::lock_options const opt = options();

inline acquisition lock_call(bool wait = true) {
    return acquisition(acquisition_terms::lock(opt, "lock", wait), t0);
}

inline acquisition permit_call(bool wait = true) {
    return acquisition(acquisition_terms::permits(opt, "semaphore", wait), t0);
}

inline store_answer granted(clock_type::time_point sent_at = t0) {
    store_answer a;
    a.result.granted = true;
    a.result.fence = 7;
    a.lease_end = sent_at + 30s;
    return a;
}

inline store_answer held(milliseconds holder_ttl) {
    store_answer a;
    a.result.holder_ttl = holder_ttl;
    return a;
}

inline store_answer failed(error_code ec, std::string server_text = {}, bool unknown = false) {
    store_answer a;
    a.result.ec = ec;
    a.result.server_text = std::move(server_text);
    a.result.outcome_unknown = unknown;
    return a;
}

inline error_code refused_error() {
    return make_error_code(boost::system::errc::connection_refused);
}

inline bool is(acquisition_action const& a, acquisition_step step) {
    return a.step == step;
}

inline bool ends(acquisition_action const& a, acquisition_end end) {
    return a.step == acquisition_step::finish && a.end == end;
}

// A driver on virtual time: each ask takes the next scripted answer (a round trip of 5 ms),
// each give-back succeeds unless told otherwise, each wait sleeps until wakes_at() and asks
// again. The caller cancels as the answer numbered `stop_at` (from 0) arrives. Returns how the
// call ended; `now` is when.
struct walk {
    acquisition machine;
    std::deque<store_answer> answers;
    clock_type::time_point now = t0;
    std::minstd_rand rng{42};
    int give_backs = 0;
    int sleeps = 0;
    int answered = 0;
    int stop_at = -1;
    bool releases = true; // a give-back's release is confirmed

    bool stopping() const { return stop_at >= 0 && answered > stop_at; }

    acquisition_action run() {
        auto a = machine.begin_attempt(false);
        for (int steps = 0; steps < 1000; ++steps) {
            switch (a.step) {
            case acquisition_step::ask: {
                REQUIRE(!answers.empty());
                auto answer = answers.front();
                answers.pop_front();
                answer.lease_end = now + 30s;
                now += 5ms;
                ++answered;
                a = machine.on_answer(answer, now, stopping());
                break;
            }
            case acquisition_step::give_back:
                ++give_backs;
                a = machine.on_given_back(releases, now, stopping());
                break;
            case acquisition_step::wait: {
                a = machine.keep_waiting(now);
                if (a.step != acquisition_step::wait)
                    break;
                auto const until = machine.wakes_at(now, true, rng);
                REQUIRE(until > now);
                now = until;
                ++sleeps;
                a = machine.on_sleep_end(now, false, stopping());
                break;
            }
            case acquisition_step::finish:
                return a;
            }
        }
        FAIL("the walk did not end");
        return a;
    }
};

} // namespace acquisition_test
