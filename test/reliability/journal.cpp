#include "journal.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

namespace colock::reliability {

journal_writer::journal_writer(std::string const& path) : path_(path) {
    if (path_.empty())
        return;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd_ < 0)
        throw std::system_error(errno, std::generic_category(), "cannot open " + path);
}

journal_writer::~journal_writer() {
    if (fd_ >= 0)
        ::close(fd_);
}

void journal_writer::acquired(std::string const& holder, std::int64_t fence,
                              std::string const& token, std::int64_t acquired_ns) {
    // Without a journal (the contenders of the other scenarios), not even the formatting.
    if (fd_ >= 0)
        append(fmt::format("a {} {} {} {}\n", holder, fence, token, acquired_ns));
}

void journal_writer::wrote(std::string const& holder, std::int64_t value) {
    if (fd_ >= 0)
        append(fmt::format("w {} {}\n", holder, value));
}

void journal_writer::released(std::string const& holder, std::int64_t fence) {
    if (fd_ >= 0)
        append(fmt::format("r {} {}\n", holder, fence));
}

void journal_writer::append(std::string const& line) {
    if (fd_ < 0)
        return;
    // One write() per line: O_APPEND keeps it whole, and nothing waits in a buffer of ours when
    // the process is killed.
    for (;;) {
        ssize_t const n = ::write(fd_, line.data(), line.size());
        if (n == static_cast<ssize_t>(line.size()))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        throw std::system_error(n < 0 ? errno : EIO, std::generic_category(),
                                "cannot append to " + path_);
    }
}

std::string read_journal_text(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read the journal " + path);
    std::stringstream content;
    content << in.rdbuf();
    return content.str();
}

void for_each_journal_line(std::string const& path, std::string_view what,
                           std::function<bool(std::string const& kind, std::string const& id,
                                              std::istream& rest)> const& step) {
    std::string const text = read_journal_text(path);
    std::size_t line_no = 0;
    for (std::size_t begin = 0, nl; (nl = text.find('\n', begin)) != std::string::npos;
         begin = nl + 1) {
        ++line_no;
        std::istringstream line(text.substr(begin, nl - begin));
        std::string kind;
        std::string id;
        line >> kind >> id;
        if (!step(kind, id, line))
            throw std::runtime_error(fmt::format("{} {}, line {}: '{}'", what, path, line_no,
                                                 text.substr(begin, nl - begin)));
    }
}

journal read_journal(std::string const& path) {
    journal j;
    // Open tenures by holder: a coroutine is in one tenure at a time.
    std::map<std::string, std::pair<colock::test::holding, bool>> open;
    for_each_journal_line(
        path, "journal",
        [&](std::string const& kind, std::string const& holder, std::istream& line) {
            bool ok = !holder.empty();
            if (kind == "a") {
                colock::test::holding h;
                h.holder = holder;
                ok = ok && (line >> h.fence >> h.token >> h.acquired_ns);
                open[holder] = {std::move(h), false};
                ++j.acquisitions;
            } else if (kind == "w") {
                std::int64_t value = 0;
                ok = ok && (line >> value) && open.contains(holder);
                j.written.push_back(value);
                if (ok)
                    open[holder].second = true;
            } else if (kind == "r") {
                ok = ok && open.erase(holder) == 1;
            } else {
                ok = false;
            }
            return ok;
        });
    for (auto& [holder, tenure] : open) {
        j.open.push_back(std::move(tenure.first));
        j.open_without_write += tenure.second ? 0 : 1;
    }
    return j;
}

char journal_last_kind(std::string const& path) {
    int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; // not made yet
    struct stat st {};
    char buf[512];
    ssize_t n = 0;
    if (::fstat(fd, &st) == 0) {
        auto const from = std::max<off_t>(0, st.st_size - static_cast<off_t>(sizeof buf));
        n = ::pread(fd, buf, sizeof buf, from);
    }
    ::close(fd);
    std::string_view tail(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    auto const end = tail.rfind('\n');
    if (end == std::string_view::npos)
        return 0;
    auto const whole = tail.substr(0, end); // up to the last complete line's end
    auto const begin = whole.rfind('\n');
    auto const line = begin == std::string_view::npos ? whole : whole.substr(begin + 1);
    return line.size() >= 2 && line[1] == ' ' ? line[0] : 0;
}

bool journal_in_tenure(std::string const& path) {
    auto const kind = journal_last_kind(path);
    return kind == 'a' || kind == 'w';
}

} // namespace colock::reliability
