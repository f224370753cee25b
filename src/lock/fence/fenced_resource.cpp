// A resource in Redis that checks the fence of every write (colock::fenced_resource): the checks
// made before any I/O, the call and the reading of its reply. The batch is fenced_writes.cpp,
// the script fence_scripts.hpp.
#include "detail/awaitable_tokens.hpp"
#include "detail/spawn.hpp"
#include "lock/fence/fence_text.hpp"
#include "lock/store/script_client.hpp"
#include "redis/cluster_slots.hpp"
#include "redis/engine.hpp"

#include <colock/error.hpp>
#include <colock/fenced_resource.hpp>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <list>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

using detail::fence_text::max_ttl_ms;
using detail::fence_text::parse_fence;
using detail::fence_text::refuse;
using detail::fence_text::shown;

// ---------------------------------------------------------------------- the resource's state

namespace detail {

// What a write came to: the error and its words, or the result.
struct fenced_outcome {
    error_code ec;
    std::string message;
    fenced_result result;
};

class fenced_resource_impl {
public:
    fenced_resource_impl(redis::connection& conn, std::string key, fenced_resource_options opt)
        : client_(std::make_shared<script_client>(
              redis::detail::engine_of(conn),
              asio::make_strand(redis::detail::engine_executor(redis::detail::engine_of(conn)))))
        , executor_(conn.get_executor())
        , key_(std::move(key))
        , opt_(opt) {}

    asio::any_io_executor const& executor() const noexcept { return executor_; }
    std::string const& key() const noexcept { return key_; }
    auto const& strand() const noexcept { return client_->strand(); }

    // From the resource's destructor: the pending writes end with operation_aborted.
    void close() {
        asio::dispatch(client_->strand(), [self = this_ptr_.lock()] {
            if (!self)
                return;
            self->closed_ = true;
            for (auto const& s : self->pending_)
                s->emit(asio::cancellation_type::terminal);
        });
    }

    // On the strand.
    static asio::awaitable<fenced_outcome> write(std::shared_ptr<fenced_resource_impl> self,
                                                 std::string name, std::int64_t fence,
                                                 fenced_writes writes);
    static asio::awaitable<fenced_outcome> read(std::shared_ptr<fenced_resource_impl> self);

    std::weak_ptr<fenced_resource_impl> this_ptr_;

private:
    // The call's outcome from the script's reply.
    fenced_outcome judge(script_reply const& r, std::string const& name, std::int64_t fence) const;
    std::string failed(std::string_view what, error_code ec, std::string_view server_text) const;

    std::shared_ptr<script_client> const client_;
    asio::any_io_executor const executor_;
    std::string const key_;
    fenced_resource_options const opt_;
    // On the strand: the signals of the writes under way, and whether the resource is gone.
    std::list<std::shared_ptr<asio::cancellation_signal>> pending_;
    bool closed_ = false;
};

std::string fenced_resource_impl::failed(std::string_view what, error_code ec,
                                         std::string_view server_text) const {
    if (ec == redis::error::server_error) {
        auto text = server_text;
        if (text.starts_with("COLOCK "))
            text.remove_prefix(7);
        return fmt::format("colock: {} '{}': {}", what, shown(key_), text);
    }
    auto link = client_->last_error_text();
    return fmt::format("colock: {} '{}': {}{}", what, shown(key_), ec.message(),
                       link.empty() ? std::string{} : " (" + link + ")");
}

fenced_outcome fenced_resource_impl::judge(script_reply const& r, std::string const& name,
                                           std::int64_t fence) const {
    fenced_outcome out;
    if (r.ec) {
        out.ec = r.ec;
        out.message = failed("fenced write under fence key", r.ec, r.server_text());
        return out;
    }
    auto const& v = r.value;
    auto const unexpected = [&] {
        out.ec = error::unexpected_reply;
        out.message =
            fmt::format("colock: fenced write under fence key '{}': unexpected reply", shown(key_));
        return out;
    };
    if (v.elements.size() < 2)
        return unexpected();
    auto const verdict = v.elements[0].as_integer();
    auto const seen_text = v.elements[1].as_string();
    if (!verdict || !seen_text)
        return unexpected();
    if (*verdict == 0) {
        auto const seen = parse_fence(*seen_text);
        auto const seen_name = v.elements.size() == 3 ? v.elements[2].as_string() : std::nullopt;
        if (!seen || !seen_name)
            return unexpected();
        if (*seen_name != name) {
            out.ec = error::invalid_argument;
            out.message = fmt::format(
                "colock: fenced write under fence key '{}': it holds fence {} of '{}', not of "
                "'{}': fences of two names do not compare, so one resource takes one name's",
                shown(key_), *seen, shown(*seen_name), shown(name));
            return out;
        }
        out.ec = error::stale_fence;
        out.message = fmt::format(
            "colock: fenced write under fence key '{}' refused: fence {} of '{}' is below the "
            "fence {} it holds, given to a later holder; nothing was written",
            shown(key_), fence, shown(name), *seen);
        return out;
    }
    if (*verdict != 1 || v.elements.size() < 2)
        return unexpected();
    std::int64_t previous = 0;
    if (!seen_text->empty()) {
        auto const p = parse_fence(*seen_text);
        if (!p)
            return unexpected();
        previous = *p;
    }
    out.result.fence = fence;
    out.result.previous_fence = previous;
    out.result.replies.assign(v.elements.begin() + 2, v.elements.end());
    return out;
}

asio::awaitable<fenced_outcome>
fenced_resource_impl::write(std::shared_ptr<fenced_resource_impl> self, std::string name,
                            std::int64_t fence, fenced_writes writes) {
    if (self->closed_)
        co_return fenced_outcome{asio::error::operation_aborted, {}, {}};
    auto signal = std::make_shared<asio::cancellation_signal>();
    auto const at = self->pending_.insert(self->pending_.end(), signal);
    // The caller's cancellation goes to the same signal as the resource's end.
    auto const state = co_await asio::this_coro::cancellation_state;
    auto caller = state.slot();
    if (caller.is_connected())
        caller.assign([signal](asio::cancellation_type t) { signal->emit(t); });

    auto const fence_text = std::to_string(fence);
    auto const ttl_text =
        self->opt_.record_ttl ? std::to_string(self->opt_.record_ttl->count()) : std::string("0");
    std::vector<std::string_view> const keys(writes.keys().begin(), writes.keys().end());
    std::vector<std::string_view> const words(writes.words_.begin(), writes.words_.end());
    script_call call{self->client_->scripts().fenced_write,
                     {self->key_},
                     {fence_text, name, ttl_text},
                     {},
                     keys,
                     words};
    auto const reply = co_await self->client_->run(call, signal->slot());

    if (caller.is_connected())
        caller.clear();
    self->pending_.erase(at);
    if (self->closed_)
        co_return fenced_outcome{asio::error::operation_aborted, {}, {}};
    co_return self->judge(reply, name, fence);
}

asio::awaitable<fenced_outcome>
fenced_resource_impl::read(std::shared_ptr<fenced_resource_impl> self) {
    resp3::request req;
    req.push("GET", self->key_);
    auto const r = co_await self->client_->exec(std::move(req));
    fenced_outcome out;
    if (r.ec) {
        out.ec = r.ec;
        out.message = self->failed("read of fence key", r.ec, r.server_text());
        co_return out;
    }
    if (r.value.is_null())
        co_return out;
    auto const text = r.value.as_string();
    auto const space = text ? text->find(' ') : std::string_view::npos;
    auto const fence = text && space != std::string_view::npos ? parse_fence(text->substr(0, space))
                                                               : std::nullopt;
    if (!fence || space + 1 >= text->size()) {
        out.ec = error::unexpected_reply;
        out.message = fmt::format("colock: read of fence key '{}': it holds \"{}\", which is not "
                                  "a fence record colock writes",
                                  shown(self->key_), shown(text.value_or("(not a string)")));
        co_return out;
    }
    out.result.fence = *fence;
    // The name, for co_read: carried in the result's one reply.
    resp3::value name;
    name.type = resp3::type::blob_string;
    name.text = std::string(text->substr(space + 1));
    out.result.replies.push_back(std::move(name));
    co_return out;
}

} // namespace detail

// ---------------------------------------------------------------------- fenced_resource

fenced_resource::fenced_resource(redis::connection& conn, std::string fence_key,
                                 fenced_resource_options opt) {
    if (fence_key.empty())
        refuse("fenced_resource: an empty fence key");
    if (opt.record_ttl && (opt.record_ttl->count() < 1 || opt.record_ttl->count() > max_ttl_ms))
        refuse(fmt::format("fenced_resource '{}': record_ttl of {} ms (1 ms to 2^40 ms)",
                           shown(fence_key), opt.record_ttl->count()));
    impl_ = std::make_shared<detail::fenced_resource_impl>(conn, std::move(fence_key), opt);
    impl_->this_ptr_ = impl_;
}

fenced_resource::fenced_resource(fenced_resource&&) noexcept = default;

fenced_resource& fenced_resource::operator=(fenced_resource&& other) noexcept {
    if (this != &other) {
        if (impl_)
            impl_->close();
        impl_ = std::move(other.impl_);
    }
    return *this;
}

fenced_resource::~fenced_resource() {
    if (impl_)
        impl_->close();
}

fenced_resource::executor_type fenced_resource::get_executor() const noexcept {
    return impl_ ? impl_->executor() : executor_type{};
}

std::string const& fenced_resource::fence_key() const noexcept {
    static std::string const none;
    return impl_ ? impl_->key() : none;
}

void fenced_resource::check(std::string const& name, std::int64_t fence,
                            fenced_writes const& writes) const {
    if (!impl_)
        refuse("fenced write through a moved-from fenced_resource");
    auto const& key = impl_->key();
    if (name.empty())
        refuse(fmt::format("fenced write under fence key '{}': an empty name", shown(key)));
    if (fence < 1)
        refuse(fmt::format("fenced write under fence key '{}': fence {} of '{}' (a fence is at "
                           "least 1)",
                           shown(key), fence, shown(name)));
    auto const slot = redis::detail::hash_slot(key);
    for (auto const& k : writes.keys()) {
        if (k == key)
            refuse(fmt::format("fenced write: the batch writes the fence key '{}' itself",
                               shown(key)));
        if (redis::detail::hash_slot(k) != slot)
            refuse(fmt::format("fenced write: key '{}' is in hash slot {}, the fence key '{}' in "
                               "{}: give every key the fence key's hash tag, so that the check "
                               "and the writes are one script on a Cluster too",
                               shown(k), redis::detail::hash_slot(k), shown(key), slot));
    }
}

void fenced_resource::start_write(std::string name, std::int64_t fence, fenced_writes writes,
                                  write_handler handler) {
    auto impl = impl_;
    auto const strand = impl->strand();
    detail::spawn_cancellable(strand,
                              detail::fenced_resource_impl::write(std::move(impl), std::move(name),
                                                                  fence, std::move(writes)),
                              std::move(handler),
                              [](auto h, std::exception_ptr e, detail::fenced_outcome out) {
                                  // A coroutine that threw (out of memory) completes the
                                  // handler with an error, never throws out of run().
                                  if (e)
                                      out.ec = make_error_code(error::unexpected_reply);
                                  std::move(h)(out.ec, std::move(out.result));
                              });
}

namespace {

// Runs `op` on the resource's strand for a coroutine that throws the outcome's words.
asio::awaitable<detail::fenced_outcome> on_strand(asio::strand<asio::any_io_executor> const& strand,
                                                  asio::awaitable<detail::fenced_outcome> op) {
    auto initiation = [strand, op = std::move(op)](auto handler) mutable {
        detail::spawn_cancellable(strand, std::move(op), std::move(handler),
                                  [](auto h, std::exception_ptr e, detail::fenced_outcome out) {
                                      std::move(h)(e, std::move(out));
                                  });
    };
    auto [e, out] = co_await asio::async_initiate<decltype(detail::nothrow_awaitable) const,
                                                  void(std::exception_ptr, detail::fenced_outcome)>(
        std::move(initiation), detail::nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    if (out.ec)
        throw system_error(out.ec, out.message.empty() ? out.ec.message() : out.message);
    co_return out;
}

// Why a holding cannot write, read when co_write is called (the holding may be gone by the time
// the write is awaited); empty when it can.
std::optional<system_error> refusal_of(bool held, bool lost, std::string_view what,
                                       std::string const& name) {
    if (lost)
        return system_error(make_error_code(error::lock_lost),
                            fmt::format("colock: fenced write under {} '{}': its lease was lost; "
                                        "nothing was sent",
                                        what, shown(name)));
    if (!held)
        return system_error(
            make_error_code(error::not_held),
            fmt::format("colock: fenced write under {} '{}': it is not held", what, shown(name)));
    return std::nullopt;
}

} // namespace

asio::awaitable<fenced_result> fenced_resource::write_held(std::optional<system_error> refusal,
                                                           std::string name, std::int64_t fence,
                                                           fenced_writes writes) {
    if (refusal)
        throw *refusal;
    co_return co_await co_write(std::move(name), fence, std::move(writes));
}

asio::awaitable<fenced_result> fenced_resource::co_write(std::string name, std::int64_t fence,
                                                         fenced_writes writes) {
    check(name, fence, writes);
    auto impl = impl_;
    auto const strand = impl->strand();
    auto out =
        co_await on_strand(strand, detail::fenced_resource_impl::write(
                                       std::move(impl), std::move(name), fence, std::move(writes)));
    co_return std::move(out.result);
}

asio::awaitable<fenced_result> fenced_resource::co_write(lock_guard const& guard,
                                                         fenced_writes writes) {
    return write_held(refusal_of(guard.owns(), guard.lost(), "the lock", guard.name()),
                      guard.name(), guard.fence(), std::move(writes));
}

asio::awaitable<fenced_result> fenced_resource::co_write(lease_guard const& holding,
                                                         fenced_writes writes) {
    return write_held(refusal_of(holding.owns(), holding.lost(), "the holding of", holding.name()),
                      holding.name(), holding.fence(), std::move(writes));
}

asio::awaitable<fenced_result> fenced_resource::co_write(leadership const& lead,
                                                         fenced_writes writes) {
    return write_held(
        refusal_of(lead.owns(), lead.guard().lost(), "the leadership of", lead.name()), lead.name(),
        lead.term(), std::move(writes));
}

asio::awaitable<std::optional<fence_record>> fenced_resource::co_read() {
    if (!impl_)
        refuse("read through a moved-from fenced_resource");
    auto impl = impl_;
    auto const strand = impl->strand();
    auto out = co_await on_strand(strand, detail::fenced_resource_impl::read(std::move(impl)));
    if (out.result.fence == 0)
        co_return std::nullopt;
    co_return fence_record{out.result.fence, std::move(out.result.replies.front().text)};
}

} // namespace colock
