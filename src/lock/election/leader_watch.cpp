// An election's watch: subscribed to the election's channel, it passes each message to the
// tracker, reads the election at the start, after a gap (a reconnection, a message that did
// not come) and when a lease may have lapsed, and hands the changes to co_next() in order. On
// the locker's strand, but for the calls from the watch object.
#include "lock/election/election_core.hpp"

#include "detail/async_form.hpp"
#include "detail/completion.hpp"

#include "lock/core/locker_context.hpp"

#include <colock/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <deque>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

namespace detail {

namespace {

// A look a little after a lease's expiry, so that the server has let it lapse.
constexpr milliseconds look_margin{5};
// A read that failed (the connection is down: its return reads again) is tried again after
// this long.
constexpr milliseconds read_retry{250};
// Readings dropped in a row because messages came while they were under way; the next one is
// taken anyway, the tracker ordering it by term and seq.
constexpr int max_dropped_readings = 3;

} // namespace

class watch_state final : public channel_listener,
                          public std::enable_shared_from_this<watch_state> {
public:
    using result_type = std::optional<leader_change>;
    using handler_type = asio::any_completion_handler<void(std::exception_ptr, result_type)>;

    explicit watch_state(std::shared_ptr<election_core> core)
        : core_(std::move(core)), strand_(core_->locker().strand()), look_timer_(strand_) {
        if (core_->quorum())
            by_majority_.emplace(core_->majority());
    }

    // Where a handler without an executor of its own completes.
    asio::any_io_executor io_executor() const { return strand_.get_inner_executor(); }

    // From any thread.
    void start() {
        asio::dispatch(strand_, [self = shared_from_this()] {
            self->core_->locker().routes().add(self->core_->channel(), self);
            asio::co_spawn(self->strand_, subscribe(self), asio::detached);
        });
    }

    // From any thread: the watch ends; `waiting` completes with operation_aborted.
    void close() {
        asio::dispatch(strand_, [self = shared_from_this()] { self->end(true); });
    }

    // One co_next(); from the caller's thread.
    void next(handler_type handler, asio::cancellation_slot slot) {
        auto c = std::make_shared<call>(std::move(handler), slot);
        if (slot.is_connected())
            slot.assign([weak = std::weak_ptr<call>(c),
                         self = shared_from_this()](asio::cancellation_type) {
                asio::dispatch(self->strand_, [weak, self] {
                    if (auto cancelled = weak.lock())
                        self->complete(cancelled, aborted(), std::nullopt);
                });
            });
        asio::dispatch(strand_, [self = shared_from_this(), c] {
            if (c->done)
                return;
            if (self->waiting_) {
                self->complete(c,
                               std::make_exception_ptr(system_error(
                                   error::invalid_argument,
                                   "colock: leader_watch::co_next: another call is under way")),
                               std::nullopt);
                return;
            }
            self->waiting_ = c;
            self->deliver();
        });
    }

    // channel_listener, on the strand.
    void on_message(std::string const& payload) override {
        if (ended_)
            return;
        // A quorum's primaries each tell every change: it counts once a majority told it.
        if (by_majority_ && !by_majority_->told(payload))
            return;
        ++messages_;
        apply(tracker_.on_message(payload));
        if (by_majority_)
            by_majority_->forget_before(tracker_.term());
    }
    void on_reconnect() override {
        if (ended_ || !subscribed_)
            return;
        // Messages that come before the reading cannot show what went unseen before them.
        tracker_.on_gap();
        read(true);
    }
    void on_close() override { end(false); }
    void drop_handlers() noexcept override {
        if (waiting_) {
            waiting_->done = true;
            waiting_->handler = {};
            waiting_.reset();
        }
    }

private:
    struct call {
        call(handler_type h, asio::cancellation_slot s) : handler(std::move(h)), slot(s) {}
        handler_type handler;
        asio::cancellation_slot slot;
        bool done = false;
    };

    static std::exception_ptr aborted() {
        return std::make_exception_ptr(system_error(asio::error::operation_aborted));
    }

    static asio::awaitable<void> subscribe(std::shared_ptr<watch_state> self) {
        auto const& channel = self->core_->channel();
        auto const [ec, refusal] = co_await self->core_->locker().store().subscribe(channel);
        if (ec) {
            self->failure_ = std::make_exception_ptr(system_error(
                ec, fmt::format("colock: watch of election '{}': could not subscribe to {} ({})",
                                self->core_->name(), channel,
                                refusal.empty() ? ec.message() : refusal)));
            self->end(false);
            co_return;
        }
        self->subscribed_ = true;
        if (self->ended_) {
            self->core_->locker().store().unsubscribe(channel);
            co_return;
        }
        // Subscribed first, read after: a change in between is in both, and the tracker
        // orders them.
        self->read(false);
    }

    // Reads the election, once at a time; `after_gap`: messages may have been missed.
    void read(bool after_gap) {
        gap_ = gap_ || after_gap;
        if (reading_) {
            again_ = true;
            return;
        }
        reading_ = true;
        asio::co_spawn(strand_, run_read(shared_from_this()), asio::detached);
    }

    static asio::awaitable<void> run_read(std::shared_ptr<watch_state> self) {
        for (;;) {
            self->again_ = false;
            auto const messages_before = self->messages_;
            auto const r = co_await self->core_->read();
            if (self->ended_)
                break;
            if (r.ec) {
                // The connection is down (its return reads again), or the server refused.
                self->look_in(read_retry);
                break;
            }
            bool const overtaken = self->messages_ != messages_before || self->again_;
            if (overtaken && ++self->dropped_ <= max_dropped_readings)
                continue;
            self->dropped_ = 0;
            bool const gap = std::exchange(self->gap_, false);
            self->reading_ = false;
            self->apply(self->tracker_.on_reading(r, gap));
            co_return;
        }
        self->reading_ = false;
    }

    void apply(leader_tracker::step const& s) {
        for (auto const& c : s.changes)
            events_.push_back(c);
        if (s.stop_looking)
            look_timer_.cancel();
        if (s.look_in)
            look_in(*s.look_in + look_margin);
        if (s.read_again)
            read(true);
        deliver();
    }

    void look_in(milliseconds after) {
        look_timer_.expires_after(after);
        look_timer_.async_wait([self = shared_from_this()](error_code ec) {
            if (!ec && !self->ended_)
                self->read(false);
        });
    }

    void deliver() {
        if (!waiting_)
            return;
        if (!events_.empty()) {
            auto c = std::move(waiting_);
            auto change = std::move(events_.front());
            events_.pop_front();
            complete(c, nullptr, std::move(change));
        } else if (ended_) {
            auto c = std::move(waiting_);
            complete(c, failure_, std::nullopt);
            failure_ = nullptr; // thrown once; then the watch is simply over
        }
    }

    // `c` by value: it may be waiting_, which this resets.
    void complete(std::shared_ptr<call> c, std::exception_ptr e, result_type r) {
        if (c->done)
            return;
        c->done = true;
        if (waiting_ == c)
            waiting_.reset();
        post_invocation(
            strand_.get_inner_executor(), std::move(c->handler), c->slot,
            [e, r = std::move(r)](handler_type h) mutable { std::move(h)(e, std::move(r)); });
    }

    // `by_user`: close(), whose pending call ends with operation_aborted and whose changes
    // not yet taken are dropped; else the locker or its connection went, and the changes
    // already seen are still handed out.
    void end(bool by_user) {
        if (ended_) {
            if (by_user)
                events_.clear();
            return;
        }
        ended_ = true;
        look_timer_.cancel();
        core_->locker().routes().remove(core_->channel(), this);
        if (subscribed_)
            core_->locker().store().unsubscribe(core_->channel());
        if (by_user) {
            events_.clear();
            if (auto c = waiting_) // a copy: complete() resets waiting_
                complete(c, aborted(), std::nullopt);
        }
        deliver();
    }

    std::shared_ptr<election_core> const core_;
    asio::strand<asio::any_io_executor> const strand_;
    leader_tracker tracker_;
    std::optional<majority_messages> by_majority_;
    lock_timer look_timer_;
    std::deque<leader_change> events_;
    std::shared_ptr<call> waiting_;
    std::exception_ptr failure_;
    std::uint64_t messages_ = 0;
    int dropped_ = 0;
    bool subscribed_ = false;
    bool reading_ = false;
    bool again_ = false;
    bool gap_ = false;
    bool ended_ = false;
};

} // namespace detail

// ---------------------------------------------------------------------- leader_watch

leader_watch::leader_watch() noexcept = default;

leader_watch::leader_watch(std::shared_ptr<detail::watch_state> state) noexcept
    : state_(std::move(state)) {}

leader_watch::leader_watch(leader_watch&& other) noexcept = default;

leader_watch& leader_watch::operator=(leader_watch&& other) noexcept {
    if (this != &other) {
        close();
        state_ = std::move(other.state_);
    }
    return *this;
}

leader_watch::~leader_watch() {
    close();
}

void leader_watch::close() {
    if (auto st = std::move(state_))
        st->close();
}

asio::awaitable<std::optional<leader_change>> leader_watch::co_next() {
    // Not a coroutine of its own: the awaitable of one initiation.
    return asio::async_initiate<asio::use_awaitable_t<> const,
                                void(std::exception_ptr, std::optional<leader_change>)>(
        [st = state_](auto handler) {
            if (!st) {
                auto ex = asio::get_associated_executor(handler);
                asio::post(ex, [h = std::move(handler)]() mutable {
                    std::move(h)(nullptr, std::optional<leader_change>());
                });
                return;
            }
            auto slot = asio::get_associated_cancellation_slot(handler);
            st->next(std::move(handler), slot);
        },
        asio::use_awaitable);
}

void leader_watch::start_next(
    std::shared_ptr<detail::watch_state> st,
    asio::any_completion_handler<void(boost::system::error_code, std::optional<leader_change>)>
        handler) {
    using result = std::optional<leader_change>;
    if (!st) {
        detail::complete_without_io(std::move(handler), boost::system::error_code{}, result());
        return;
    }
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto const ex = asio::get_associated_executor(handler, st->io_executor());
    // Completed as co_next's (its slot cleared there), then handed on with the code.
    st->next(asio::bind_executor(ex,
                                 [h = std::move(handler)](std::exception_ptr e, result r) mutable {
                                     auto const ec = detail::code_of(e);
                                     std::move(h)(ec, ec ? result() : std::move(r));
                                 }),
             slot);
}

leader_watch election::observe() {
    auto st = std::make_shared<detail::watch_state>(core_);
    st->start();
    return leader_watch(std::move(st));
}

} // namespace colock
