// Seeing and operating locks from outside their holders: status reads what the server holds
// for a lock and who holds it; a forced unlock ends a holder's lease and tells its locker at
// once (the holder record it names is kept in holder_record.cpp).
#include "detail/failure_report.hpp"
#include "detail/spawn.hpp"
#include "lock/base/awaited_call.hpp"
#include "lock/base/errors.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/locker_context.hpp"

#include <colock/locker.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <charconv>
#include <climits>
#include <exception>
#include <string_view>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

std::string_view to_string(lock_state state) noexcept {
    switch (state) {
    case lock_state::free:
        return "free";
    case lock_state::held:
        return "held";
    case lock_state::handed:
        return "handed";
    }
    return "unknown";
}

namespace detail {

namespace {

template <class Int>
std::optional<Int> parse_integer(std::string_view text) {
    Int value{};
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty())
        return std::nullopt;
    return value;
}

// The space-separated words of a lock key's value.
std::vector<std::string_view> words(std::string_view text) {
    std::vector<std::string_view> out;
    while (!text.empty()) {
        auto const space = text.find(' ');
        out.push_back(text.substr(0, space));
        if (space == std::string_view::npos)
            break;
        text.remove_prefix(space + 1);
    }
    return out;
}

// Reads the lock key's value and PTTL into `st`; false when they are not a lock's (a key set
// by hand, or by something else under the prefix).
bool read_lock_value(lock_reading const& r, lock_status& st) {
    st.queued = r.queued > 0 ? static_cast<std::size_t>(r.queued) : 0;
    st.ttl = r.pttl == -1 ? milliseconds::max() : milliseconds(std::max<std::int64_t>(r.pttl, 0));
    if (r.value.empty()) {
        st.state = lock_state::free;
        st.ttl = milliseconds{0};
        return true;
    }
    auto const w = words(r.value);
    // The scripts count fences in Lua's numbers, exact below 2^53, and give none past 2^53 - 1.
    constexpr std::int64_t largest_fence = (std::int64_t{1} << 53) - 1;
    auto const fence = w.size() >= 2 ? parse_integer<std::int64_t>(w[1]) : std::nullopt;
    if (!fence || *fence < 0 || *fence > largest_fence)
        return false;
    st.fence = *fence;
    if (w[0] == "F" && w.size() == 2) {
        st.state = lock_state::free;
        return true;
    }
    if (w[0] == "R" && w.size() == 3) {
        st.state = lock_state::handed;
        if (w[2] != "-") // "-": a forced unlock, claimed by nobody
            st.holder_id = std::string(w[2]);
        return true;
    }
    if (w[0] == "H" && w.size() == 6) {
        auto const since = parse_integer<std::int64_t>(w[4]);
        if (!since || *since < 0)
            return false;
        st.state = lock_state::held;
        st.holder_id = std::string(w[2]);
        st.token = std::string(w[3]);
        st.since = wall_time_of_ms(*since);
        return true;
    }
    return false;
}

} // namespace

holder_info read_holder(std::vector<std::pair<std::string, std::string>> const& fields) {
    holder_info h;
    for (auto const& [field, text] : fields) {
        if (field == "host")
            h.host = text;
        else if (field == "pid")
            h.pid = parse_integer<std::int64_t>(text).value_or(0);
        else if (field == "program")
            h.program = text;
        else if (field == "client_name")
            h.client_name = text;
        else if (field == "started")
            h.started = wall_time_of_ms(parse_integer<std::int64_t>(text).value_or(0));
    }
    return h;
}

namespace {

// What went wrong, naming the lock and the operation; for a connection that could not be
// established, the connection's account of why.
std::string failure_message(lease_store const& store, std::string_view what,
                            std::string const& name, error_code ec,
                            std::string const& server_text) {
    std::string why = server_text;
    if (why.empty() && is_connect_failure(ec))
        why = store.last_error_text();
    if (why.empty())
        why = ec.message();
    return fmt::format("colock: {} of lock '{}': {}", what, name, why);
}

struct status_outcome {
    error_code ec;
    std::string message;
    lock_status status;
};

struct force_unlock_outcome {
    error_code ec;
    std::string message;
    bool ended = false;
};

asio::awaitable<status_outcome> run_status(std::shared_ptr<locker_context> self, std::string name) {
    status_outcome out;
    lock_keys const keys(self->prefix(), name, self->id());
    auto const reading = co_await self->store().read(keys);
    if (reading.ec) {
        out.ec = reading.ec;
        out.message =
            failure_message(self->store(), "status", name, reading.ec, reading.server_text);
        co_return out;
    }
    out.status.name = name;
    if (!read_lock_value(reading, out.status)) {
        out.ec = error::unexpected_reply;
        out.message = fmt::format("colock: status of lock '{}': its key {} does not read as a "
                                  "lock's (value \"{}\"); was it set by something else?",
                                  name, keys.key, reading.value);
        co_return out;
    }
    if (out.status.holder_id.empty())
        co_return out;
    // A lock set's holder is its entry "<locker>/<n>": the record is its locker's.
    auto const locker_id = out.status.holder_id.substr(0, out.status.holder_id.find('/'));
    auto const record = co_await self->store().read_record(self->locker_key_prefix() + locker_id);
    if (record.ec) {
        out.ec = record.ec;
        out.message = failure_message(self->store(), "status", name, record.ec, record.server_text);
        co_return out;
    }
    if (!record.fields.empty())
        out.status.holder = read_holder(record.fields);
    co_return out;
}

asio::awaitable<force_unlock_outcome> run_force_unlock(std::shared_ptr<locker_context> self,
                                                       std::string name) {
    force_unlock_outcome out;
    lock_keys const keys(self->prefix(), name, self->id());
    auto const r = co_await self->store().force_unlock(keys, self->locker_key_prefix());
    if (r.ec) {
        out.ec = r.ec;
        out.message = failure_message(self->store(), "forced unlock", name, r.ec, r.server_text);
        co_return out;
    }
    out.ended = r.ended;
    if (r.ended && self->store().logs(log_level::warning))
        self->store().log(log_level::warning,
                          fmt::format("colock: lock '{}' force-unlocked: the lease of locker {} "
                                      "was ended",
                                      name, r.owner));
    co_return out;
}

} // namespace

namespace {

// The awaitable of `run(impl, name)`, for co_status and co_force_unlock: the name checked when
// it is awaited, a failure thrown with its message, completed off the locker's strand.
template <class Result, class Run, class Take>
asio::awaitable<Result> await_run(std::shared_ptr<locker_context> impl, std::string name, Run run,
                                  Take take) {
    auto initiation = [impl = std::move(impl), name = std::move(name), run,
                       take](auto handler) mutable {
        try {
            validate(name, lock_options{});
        } catch (...) {
            refuse_awaited<Result>(std::move(handler), impl->strand().get_inner_executor());
            return;
        }
        auto strand = impl->strand();
        spawn_cancellable(strand, run(std::move(impl), std::move(name)), std::move(handler),
                          [take](auto h, std::exception_ptr e, auto out) {
                              complete_awaited<Result>(std::move(h), e, std::move(out), take);
                          });
    };
    return asio::async_initiate<asio::use_awaitable_t<> const, void(std::exception_ptr, Result)>(
        std::move(initiation), asio::use_awaitable);
}

} // namespace

} // namespace detail

void locker::start_status(std::string name, status_handler handler) {
    auto context = detail::context_of(*this);
    auto strand = context->strand();
    detail::spawn_cancellable(
        strand, detail::run_status(std::move(context), std::move(name)), std::move(handler),
        [](status_handler h, std::exception_ptr e, detail::status_outcome out) {
            if (e)
                out.ec = error::unexpected_reply;
            detail::complete_reporting(std::move(h), out.message, e, out.ec, std::move(out.status));
        });
}

void locker::start_force_unlock(std::string name, force_unlock_handler handler) {
    auto context = detail::context_of(*this);
    auto strand = context->strand();
    detail::spawn_cancellable(
        strand, detail::run_force_unlock(std::move(context), std::move(name)), std::move(handler),
        [](force_unlock_handler h, std::exception_ptr e, detail::force_unlock_outcome out) {
            if (e)
                out.ec = error::unexpected_reply;
            detail::complete_reporting(std::move(h), out.message, e, out.ec, out.ended);
        });
}

asio::awaitable<lock_status> locker::co_status(std::string_view name) {
    return detail::await_run<lock_status>(
        detail::context_of(*this), std::string(name),
        [](std::shared_ptr<detail::locker_context> impl, std::string n) {
            return detail::run_status(std::move(impl), std::move(n));
        },
        [](detail::status_outcome out) { return std::move(out.status); });
}

asio::awaitable<bool> locker::co_force_unlock(std::string_view name) {
    return detail::await_run<bool>(
        detail::context_of(*this), std::string(name),
        [](std::shared_ptr<detail::locker_context> impl, std::string n) {
            return detail::run_force_unlock(std::move(impl), std::move(n));
        },
        [](detail::force_unlock_outcome out) { return out.ended; });
}

} // namespace colock
