// lock_scope: explicit re-entry. Per name, the record of the lease the scope took last (weakly:
// the scope holds no guard), the call of the scope taking it now, and the calls waiting for
// that one's outcome. On the scope's one coroutine context, but for the holds, which the
// guards keep from any thread.
#include "lock/mutex/guard.hpp"

#include "detail/async_form.hpp"
#include "detail/awaitable_tokens.hpp"

#include <colock/lock_scope.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

namespace detail {

class scope_state {
public:
    explicit scope_state(colock::locker& l) : locker_(&l) {}

    colock::locker& locker() const noexcept { return *locker_; }

    // Takes `name` for the scope (see lock_scope::co_lock; `wait` false: co_try_lock).
    static asio::awaitable<std::optional<lock_guard>>
    take(std::shared_ptr<scope_state> self, std::string name, lock_options opt, bool wait);
    // take() for co_lock.
    static asio::awaitable<lock_guard> lock(std::shared_ptr<scope_state> self, std::string name,
                                            lock_options opt) {
        auto g = co_await take(std::move(self), std::move(name), std::move(opt), true);
        co_return std::move(*g);
    }

    std::size_t hold_count(std::string_view name) const;

    // The scope is destroyed: its pending calls end with operation_aborted.
    void close();

private:
    struct entry {
        std::weak_ptr<guard_state> lease; // the lease the scope took last on the name
        bool taking = false;              // a call of the scope asks the locker for it now
        std::size_t waiting = 0;          // calls waiting for that call's outcome
    };

    // A call waiting for the outcome of the call taking its name; woken by cancelling its
    // timer. A frame destroyed unresumed (the io_context's end) leaves the list.
    struct waiter {
        waiter(scope_state& s, entry& e, asio::any_io_executor ex)
            : owner(s), on(e), timer(std::move(ex)) {
            owner.waiters_.push_back(this);
            ++on.waiting;
        }
        waiter(waiter const&) = delete;
        waiter& operator=(waiter const&) = delete;
        ~waiter() {
            std::erase(owner.waiters_, this);
            --on.waiting;
        }
        scope_state& owner;
        entry& on;
        lock_timer timer;
        bool woken = false;
    };

    // A call asking the locker: the scope's close cancels it as its caller would.
    struct asking {
        asio::cancellation_signal signal;
        bool done = false;
    };

    // Marks `e` taken while a call asks for it; on the way out (however it ends) the calls
    // waiting for its outcome wake.
    struct taking_mark {
        taking_mark(scope_state& s, entry& e) : owner(s), on(e) { on.taking = true; }
        taking_mark(taking_mark const&) = delete;
        taking_mark& operator=(taking_mark const&) = delete;
        ~taking_mark() {
            on.taking = false;
            owner.wake(on);
        }
        scope_state& owner;
        entry& on;
    };

    static lock_guard share_live(entry& e);
    void wake(entry const& e);
    void prune();
    // Runs `op` (the locker's co_lock or co_try_lock) on the caller's executor, cancelled by
    // the caller's cancellation and by the scope's close; never throws.
    template <class Result>
    asio::awaitable<std::tuple<std::exception_ptr, Result>> ask(asio::awaitable<Result> op);

    colock::locker* const locker_;
    std::map<std::string, entry, std::less<>> names_;
    std::vector<waiter*> waiters_;
    std::vector<std::weak_ptr<asking>> asking_;
    std::size_t prune_at_ = 64;
    bool closed_ = false;
};

namespace {

system_error aborted(std::string const& name) {
    return system_error(asio::error::operation_aborted,
                        fmt::format("colock: lock '{}' of a lock_scope", name));
}

} // namespace

lock_guard scope_state::share_live(entry& e) {
    auto st = e.lease.lock();
    if (!st || st->lost() || st->released() || !st->running())
        return lock_guard{};
    return guard_access::try_share(std::move(st));
}

void scope_state::wake(entry const& e) {
    for (auto* w : waiters_)
        if (&w->on == &e && !w->woken) {
            w->woken = true;
            w->timer.cancel();
        }
}

void scope_state::close() {
    closed_ = true;
    for (auto* w : waiters_)
        w->timer.cancel();
    for (auto const& weak : asking_)
        if (auto a = weak.lock(); a && !a->done)
            a->signal.emit(asio::cancellation_type::terminal);
    asking_.clear();
}

// Records of leases all of whose guards went are dropped now and then, so that a long-lived
// scope over many names does not grow without end.
void scope_state::prune() {
    if (names_.size() < prune_at_)
        return;
    std::erase_if(names_, [](auto const& kv) {
        auto const& e = kv.second;
        auto st = e.lease.lock();
        return !e.taking && e.waiting == 0 && (!st || st->holds() == 0);
    });
    std::erase_if(asking_, [](auto const& w) { return w.expired(); });
    prune_at_ = std::max<std::size_t>(64, 2 * names_.size());
}

std::size_t scope_state::hold_count(std::string_view name) const {
    auto it = names_.find(name);
    if (it == names_.end())
        return 0;
    auto st = it->second.lease.lock();
    if (!st || st->lost() || st->released() || !st->running())
        return 0;
    return st->holds();
}

template <class Result>
asio::awaitable<std::tuple<std::exception_ptr, Result>>
scope_state::ask(asio::awaitable<Result> op) {
    auto call = std::make_shared<asking>();
    asking_.push_back(call);
    auto initiation = [call, op = std::move(op)](auto handler) mutable {
        // Installed here, on the caller's context, where the caller (and the scope's close)
        // emit; the locker's call takes it to its strand itself.
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
            slot.assign([call](asio::cancellation_type type) {
                if (!call->done)
                    call->signal.emit(type);
            });
        auto ex = asio::get_associated_executor(handler);
        asio::co_spawn(ex, std::move(op),
                       asio::bind_cancellation_slot(call->signal.slot(),
                                                    [call, handler = std::move(handler)](
                                                        std::exception_ptr e, Result r) mutable {
                                                        call->done = true;
                                                        std::move(handler)(e, std::move(r));
                                                    }));
    };
    auto outcome = co_await asio::async_initiate<decltype(nothrow_awaitable) const,
                                                 void(std::exception_ptr, Result)>(
        std::move(initiation), nothrow_awaitable);
    std::erase_if(asking_, [&](auto const& weak) {
        auto a = weak.lock();
        return !a || a == call;
    });
    co_return outcome;
}

asio::awaitable<std::optional<lock_guard>> scope_state::take(std::shared_ptr<scope_state> self,
                                                             std::string name, lock_options opt,
                                                             bool wait) {
    validate(name, opt);
    // wait_timeout bounds the whole call: the wait behind another call of the scope, then its
    // own turn.
    wait_budget const budget(opt.wait_timeout, clock_type::now());
    self->prune();
    for (;;) {
        if (self->closed_)
            throw aborted(name);
        auto& e = self->names_[name];
        if (auto g = share_live(e))
            co_return std::optional<lock_guard>(std::move(g));
        if (!e.taking)
            break;
        if (!wait)
            co_return std::nullopt;
        // Another call of the scope is taking it: its outcome first.
        waiter w(*self, e, co_await asio::this_coro::executor);
        w.timer.expires_at(budget.deadline().value_or(clock_type::time_point::max()));
        auto [ec] = co_await w.timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (self->closed_)
            throw aborted(name);
        if (!w.woken) {
            if (ec)
                throw aborted(name); // the caller's cancellation
            throw system_error(
                error::timeout,
                fmt::format("colock: lock '{}' of a lock_scope: not taken within "
                            "wait_timeout ({} ms), behind another call of the "
                            "scope",
                            name, opt.wait_timeout.value_or(std::chrono::milliseconds{}).count()));
        }
    }

    // The scope's own turn, with what is left of wait_timeout.
    auto& e = self->names_[name];
    taking_mark mark(*self, e);
    opt.wait_timeout = budget.left(clock_type::now());
    auto& lk = self->locker();
    std::optional<lock_guard> got;
    std::exception_ptr failure;
    if (wait) {
        auto [ex, g] = co_await self->ask(lk.co_lock(name, std::move(opt)));
        failure = ex;
        if (!ex)
            got.emplace(std::move(g));
    } else {
        auto [ex, g] = co_await self->ask(lk.co_try_lock(name, std::move(opt)));
        failure = ex;
        got = std::move(g);
    }
    if (self->closed_) {
        got.reset(); // given back: the call ends as the scope did
        throw aborted(name);
    }
    if (failure)
        std::rethrow_exception(failure);
    if (got)
        e.lease = guard_access::state(*got);
    co_return got;
}

} // namespace detail

lock_scope::lock_scope(locker& l) : state_(std::make_shared<detail::scope_state>(l)) {}

lock_scope::~lock_scope() {
    state_->close();
}

locker& lock_scope::get_locker() const noexcept {
    return state_->locker();
}

// Not coroutines themselves: the scope may be gone before their awaitables run.
asio::awaitable<lock_guard> lock_scope::co_lock(std::string_view name, lock_options opt) {
    return detail::scope_state::lock(state_, std::string(name), std::move(opt));
}

asio::awaitable<std::optional<lock_guard>> lock_scope::co_try_lock(std::string_view name,
                                                                   lock_options opt) {
    return detail::scope_state::take(state_, std::string(name), std::move(opt), false);
}

namespace {

// Runs the scope's take on `ex` for a completion handler, which the caller's cancellation
// reaches through co_spawn; completes on `ex`, never inside the initiating call.
template <class Handler, class Complete>
void spawn_take(std::shared_ptr<detail::scope_state> st, asio::any_io_executor ex, std::string name,
                lock_options opt, bool wait, Handler handler, Complete complete) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    asio::co_spawn(ex,
                   detail::scope_state::take(std::move(st), std::move(name), std::move(opt), wait),
                   asio::bind_cancellation_slot(
                       slot, [handler = std::move(handler),
                              complete](std::exception_ptr e, std::optional<lock_guard> g) mutable {
                           complete(std::move(handler), detail::code_of(e), std::move(g));
                       }));
}

} // namespace

void lock_scope::start_lock(std::shared_ptr<detail::scope_state> st, asio::any_io_executor ex,
                            std::string name, lock_options opt, lock_handler handler) {
    spawn_take(std::move(st), std::move(ex), std::move(name), std::move(opt), true,
               std::move(handler), [](lock_handler h, error_code ec, std::optional<lock_guard> g) {
                   std::move(h)(ec, g ? std::move(*g) : lock_guard{});
               });
}

void lock_scope::start_try_lock(std::shared_ptr<detail::scope_state> st, asio::any_io_executor ex,
                                std::string name, lock_options opt, try_lock_handler handler) {
    spawn_take(std::move(st), std::move(ex), std::move(name), std::move(opt), false,
               std::move(handler),
               [](try_lock_handler h, error_code ec, std::optional<lock_guard> g) {
                   std::move(h)(ec, std::move(g));
               });
}

std::size_t lock_scope::hold_count(std::string_view name) const {
    return state_->hold_count(name);
}

} // namespace colock
