#include "subscription_book.hpp"

#include <colock/redis/error.hpp>

#include <algorithm>

namespace colock::redis::detail {

namespace {

template <class T>
void add_once(std::vector<T>& v, T const& x) {
    if (std::find(v.begin(), v.end(), x) == v.end())
        v.push_back(x);
}

} // namespace

subscription_book::command_id subscription_book::new_command(bool subscribe, bool handshake,
                                                             std::vector<std::string> channels,
                                                             std::vector<command>& out) {
    command_id const id = next_command_++;
    for (auto const& c : channels) {
        auto& st = channels_[c];
        st.on_server = subscribe;
        st.latest = id;
    }
    out.push_back(command{id, subscribe, channels});
    commands_.emplace(id, command_state{subscribe, handshake, std::move(channels), {}});
    return id;
}

void subscription_book::wait_for(op_id op, command_id cmd) {
    auto& waiters = commands_.at(cmd).waiters;
    if (std::find(waiters.begin(), waiters.end(), op) != waiters.end())
        return;
    waiters.push_back(op);
    ++ops_.at(op).waiting;
}

std::pair<subscription_book::op_id, std::vector<subscription_book::command>>
subscription_book::change(bool subscribe, std::vector<std::string> channels,
                          bool wait_for_session) {
    op_id const op = next_op_++;
    auto& o = ops_[op];
    o.subscribe = subscribe;
    std::vector<command> out;
    std::vector<std::string> to_send;  // channels whose first or last subscriber this is
    std::vector<command_id> in_flight; // SUBSCRIBEs already on their way that this one needs
    for (auto& c : channels) {
        if (subscribe) {
            auto& st = channels_[c];
            ++st.count;
            o.counted.push_back(c);
            if (!session_open_)
                continue;
            if (!st.on_server)
                add_once(to_send, c);
            else if (st.latest != 0)
                add_once(in_flight, st.latest);
        } else {
            auto it = channels_.find(c);
            if (it == channels_.end() || it->second.count == 0)
                continue; // not counted (perhaps dropped after a refusal): nothing to undo
            if (--it->second.count > 0)
                continue;
            if (session_open_ && it->second.on_server)
                add_once(to_send, c);
            else
                forget_if_idle(it);
        }
    }
    if (!to_send.empty())
        in_flight.push_back(new_command(subscribe, false, std::move(to_send), out));
    for (auto cmd : in_flight)
        wait_for(op, cmd);
    if (subscribe && !session_open_ && wait_for_session && !o.counted.empty())
        o.waits_for_session = true;
    else if (o.waiting == 0)
        finish(op);
    return {op, std::move(out)};
}

template <class Then>
void subscription_book::stop_waiting_for_session(Then then) {
    std::vector<op_id> waiting; // first: `then` may finish operations, which changes ops_
    for (auto& [id, o] : ops_)
        if (o.waits_for_session)
            waiting.push_back(id);
    for (auto id : waiting) {
        auto& o = ops_.at(id);
        o.waits_for_session = false;
        then(id, o);
    }
}

std::vector<subscription_book::command> subscription_book::open_session() {
    if (session_open_)
        close_session();
    session_open_ = true;
    std::vector<command> out;
    for (auto it = channels_.begin(); it != channels_.end();) {
        auto next = std::next(it);
        if (it->second.count > 0)
            new_command(true, true, std::vector<std::string>(1, it->first), out);
        else
            forget_if_idle(it);
        it = next;
    }
    // Operations that waited for this session wait for the handshake's word on their channels.
    stop_waiting_for_session([this](op_id id, op_state& o) {
        for (auto const& c : o.counted)
            if (auto it = channels_.find(c); it != channels_.end() && it->second.latest != 0)
                wait_for(id, it->second.latest);
        if (o.waiting == 0)
            finish(id);
    });
    return out;
}

void subscription_book::on_answer(command_id id, bool refused, std::string_view server_text) {
    auto node = commands_.extract(id);
    if (node.empty())
        return;
    auto& cmd = node.mapped();
    for (auto const& c : cmd.channels) {
        auto it = channels_.find(c);
        if (it == channels_.end())
            continue;
        auto& st = it->second;
        if (st.latest == id) {
            st.latest = 0;
            if (refused)
                st.on_server = !cmd.subscribe; // the server did not change
        }
        // A handshake SUBSCRIBE refused: subscribers counted before this session were told of
        // success and will unsubscribe some day, so their counts stay (with the channel off
        // the server) and their unsubscriptions never take a newer subscriber's count. The
        // operations waiting for this command fail below and take back their own.
        forget_if_idle(it);
    }
    for (auto op : cmd.waiters) {
        auto& o = ops_.at(op);
        if (refused && !o.ec) {
            o.ec = error::server_error;
            o.server_text = std::string(server_text);
        }
        if (--o.waiting == 0)
            finish(op);
    }
}

void subscription_book::close_session(boost::system::error_code ec) {
    session_open_ = false;
    outbox_.clear(); // commands of a closed session never go out
    auto commands = std::move(commands_);
    commands_.clear();
    for (auto it = channels_.begin(); it != channels_.end();) {
        auto next = std::next(it);
        it->second.on_server = false;
        it->second.latest = 0;
        forget_if_idle(it);
        it = next;
    }
    for (auto& [id, cmd] : commands) {
        for (auto op : cmd.waiters) {
            auto& o = ops_.at(op);
            if (ec && !o.ec)
                o.ec = ec;
            if (--o.waiting == 0)
                finish(op);
        }
    }
}

void subscription_book::abandon_waiting(boost::system::error_code ec) {
    stop_waiting_for_session([this, ec](op_id id, op_state& o) {
        o.ec = ec;
        finish(id);
    });
}

void subscription_book::finish(op_id op) {
    auto node = ops_.extract(op);
    auto& o = node.mapped();
    if (o.ec && o.subscribe) {
        std::vector<std::string> left_on_server;
        for (auto const& c : o.counted) {
            auto it = channels_.find(c);
            if (it == channels_.end())
                continue;
            if (it->second.count > 0)
                --it->second.count;
            // Subscribed for this operation (a handshake SUBSCRIBE of another of its channels
            // was refused, this one's accepted) and counted by nobody else now.
            if (session_open_ && it->second.count == 0 && it->second.on_server)
                add_once(left_on_server, c);
            else
                forget_if_idle(it);
        }
        if (!left_on_server.empty())
            new_command(false, false, std::move(left_on_server), outbox_);
    }
    finished_.push_back(finished{op, o.ec, std::move(o.server_text)});
}

void subscription_book::forget_if_idle(channel_map::iterator it) {
    auto const& st = it->second;
    if (st.count == 0 && !st.on_server && st.latest == 0)
        channels_.erase(it);
}

std::vector<subscription_book::finished> subscription_book::take_finished() {
    auto out = std::move(finished_);
    finished_.clear();
    return out;
}

std::vector<subscription_book::command> subscription_book::take_commands() {
    auto out = std::move(outbox_);
    outbox_.clear();
    return out;
}

std::size_t subscription_book::count(std::string_view channel) const {
    auto it = channels_.find(channel);
    return it == channels_.end() ? 0 : it->second.count;
}

bool subscription_book::on_server(std::string_view channel) const {
    auto it = channels_.find(channel);
    return it != channels_.end() && it->second.on_server;
}

std::vector<std::string> subscription_book::counted() const {
    std::vector<std::string> out;
    for (auto const& [c, st] : channels_)
        if (st.count > 0)
            out.push_back(c);
    return out;
}

} // namespace colock::redis::detail
