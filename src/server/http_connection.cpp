#include "server/http_connection.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdio>
#include <utility>

namespace voxd::server {
namespace {

namespace net = boost::asio;
using boost::system::error_code;

// Bytes the connection may buffer beyond one request's headers: the start of pipelined requests.
constexpr size_t kReadSlack = 64 << 10;
constexpr size_t kReadSize = 16 << 10;
// After a response that leaves a request body unread, the connection reads and drops what the
// client still sends for this long (or this much) before closing, so that the close does not
// reset the connection under the response before the client has read it.
constexpr std::chrono::milliseconds kLingerTime{2000};
constexpr size_t kLingerBytes = 1 << 20;
// How soon a read whose deadline passed is cancelled again while it has not ended.
constexpr std::chrono::milliseconds kCancelRetry{10};

ReadFailure read_failure(const error_code& error) {
  if (error == http::error::header_limit || error == http::error::buffer_overflow) {
    return ReadFailure::kHeadersTooLarge;
  }
  if (error == http::error::body_limit) return ReadFailure::kBodyTooLarge;
  return ReadFailure::kMalformed;
}

// Whether `error` is the HTTP parser's (the client sent something malformed) rather than the
// socket's (the client went away).
bool is_parse_error(const error_code& error) {
  return error.category() == http::make_error_code(http::error::header_limit).category() &&
         error != http::error::end_of_stream && error != http::error::partial_message;
}

std::string chunk(const std::string& bytes) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

}  // namespace

Connection::Connection(net::ip::tcp::socket socket, const ConnectionLimits& limits,
                       RequestHandler& handler)
    : socket_(std::move(socket)),
      limits_(limits),
      handler_(handler),
      buffer_(limits.max_header_bytes + kReadSlack),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()) {}

Connection::~Connection() {
  if (reply_) reply_->finished(false);
}

void Connection::start() {
  error_code ignored;
  socket_.set_option(net::ip::tcp::no_delay(true), ignored);
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_next(); });
}

void Connection::drain() {
  net::post(socket_.get_executor(), [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self) return;
    self->draining_ = true;
    self->close_after_reply_ = true;
    if (self->state_ == State::kIdle) self->close();
  });
}

void Connection::abort() {
  net::post(socket_.get_executor(), [weak = weak_from_this()] {
    if (auto self = weak.lock()) self->close();
  });
}

void Connection::arm(net::steady_timer& timer, std::chrono::milliseconds timeout) {
  timer.expires_after(timeout);
  const bool is_write = &timer == &write_timer_;
  timer.async_wait([weak = weak_from_this(), is_write](error_code error) {
    auto self = weak.lock();
    if (error || !self || self->state_ == State::kClosed) return;
    // Re-armed after this wait had already expired: the new deadline stands.
    const net::steady_timer& fired = is_write ? self->write_timer_ : self->read_timer_;
    if (fired.expiry() > net::steady_timer::clock_type::now()) return;
    // An expired wait cannot be cancelled: a write or read that ended while this completion was
    // queued is not late.
    if (is_write) {
      if (self->writing_) self->close();  // a client that stopped reading
      return;
    }
    if (self->state_ == State::kIdle || self->state_ == State::kLingering) {
      self->close();  // a client that never sent a request, or lingers
      return;
    }
    const bool reading =
        self->state_ == State::kReadingHeader || self->state_ == State::kReadingBody;
    if (!reading || self->writing_) return;  // ended, or "100 Continue" is being written
    // The read in progress ends with operation_aborted and answers 408. Beast's read of a
    // header is one operation of many socket reads: a cancel that comes while its next step
    // waits in the strand's queue, not on the socket, cancels nothing. So the cancel is
    // repeated until the read ends (which cancels the timer).
    self->read_timed_out_ = true;
    error_code ignored;
    self->socket_.cancel(ignored);
    self->arm(self->read_timer_, kCancelRetry);
  });
}

void Connection::read_next() {
  if (state_ == State::kClosed) return;
  state_ = State::kIdle;
  if (draining_) {
    close();
    return;
  }
  if (buffer_.size() > 0) {
    read_header();
    return;
  }
  // An idle connection holds no buffer: it waits for the socket to become readable.
  buffer_.shrink_to_fit();
  arm(read_timer_, first_request_ ? limits_.header_timeout : limits_.idle_timeout);
  socket_.async_wait(net::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](error_code error) {
                       if (self->state_ != State::kIdle) return;
                       if (error) {
                         self->close();  // idle past its timeout, or closed
                         return;
                       }
                       self->read_header();  // the client's close, too, is read there
                     });
}

void Connection::read_header() {
  state_ = State::kReadingHeader;
  read_timed_out_ = false;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(limits_.max_header_bytes));
  parser_->body_limit(limits_.max_body_bytes);
  arm(read_timer_, limits_.header_timeout);
  read_request_part(State::kReadingHeader);
}

void Connection::read_request_part(State reading) {
  http::async_read_some(
      socket_, buffer_, *parser_, [self = shared_from_this(), reading](error_code error, size_t) {
        if (self->state_ != reading) return;
        // A deadline that passed while this read's completion was queued cancelled nothing.
        if (!error && self->read_timed_out_) error = net::error::operation_aborted;
        const bool part_done = reading == State::kReadingHeader ? self->parser_->is_header_done()
                                                                : self->parser_->is_done();
        if (!error && !part_done) {
          self->read_request_part(reading);
        } else if (reading == State::kReadingHeader) {
          self->on_header(error);
        } else {
          self->on_body(error);
        }
      });
}

void Connection::on_header(error_code error) {
  read_timer_.cancel();
  if (state_ != State::kReadingHeader) return;
  if (error) {
    fail_read(error);
    return;
  }
  const RequestHead& head = parser_->get();
  request_keep_alive_ = parser_->keep_alive();
  chunked_ = head.version() >= 11;
  Screening screening = handler_.screen(head);
  if (screening.refusal) {
    begin_reply(std::move(screening.refusal), !parser_->is_done());
    return;
  }
  arrival_ = std::move(screening.arrival);
  if (!parser_->is_done() && head[http::field::expect] == "100-continue") {
    writing_ = true;
    out_ = "HTTP/1.1 100 Continue\r\n\r\n";
    arm(write_timer_, limits_.write_timeout);
    net::async_write(socket_, net::buffer(out_),
                     [self = shared_from_this()](error_code write_error, size_t) {
                       self->write_timer_.cancel();
                       self->writing_ = false;
                       if (self->state_ != State::kReadingHeader) return;
                       if (write_error) {
                         self->close();
                         return;
                       }
                       self->read_body();
                     });
    return;
  }
  read_body();
}

void Connection::read_body() {
  state_ = State::kReadingBody;
  read_timed_out_ = false;
  if (parser_->is_done()) {
    on_body({});
    return;
  }
  parser_->eager(true);
  arm(read_timer_, limits_.body_timeout);
  read_request_part(State::kReadingBody);
}

void Connection::on_body(error_code error) {
  read_timer_.cancel();
  if (state_ != State::kReadingBody) return;
  if (error) {
    fail_read(error);
    return;
  }
  first_request_ = false;
  std::function<void()> wake = [weak = weak_from_this(), executor = socket_.get_executor()] {
    // Posts without touching the connection: this may run on another thread under its locks.
    net::post(executor, [weak] {
      if (auto self = weak.lock(); self && self->waiting_) self->pump();
    });
  };
  std::shared_ptr<Reply> reply =
      handler_.handle(parser_->release(), std::move(wake), std::move(arrival_));
  begin_reply(std::move(reply), false);
}

void Connection::fail_read(error_code error) {
  arrival_.reset();
  const bool timed_out = read_timed_out_ && error == net::error::operation_aborted;
  if (!timed_out && !is_parse_error(error)) {
    close();  // the client went away or reset the connection: nobody to answer
    return;
  }
  const ReadFailure failure = timed_out ? ReadFailure::kTimeout : read_failure(error);
  // A Content-Length over the limit is refused while the fields are parsed: the request line
  // (what the request was for) is in by then.
  const bool head_known =
      parser_ && (parser_->is_header_done() || failure == ReadFailure::kBodyTooLarge);
  const RequestHead* head = head_known ? &parser_->get() : nullptr;
  begin_reply(handler_.unreadable(failure, head), true);
}

void Connection::begin_reply(std::shared_ptr<Reply> reply, bool body_unread) {
  state_ = State::kReplying;
  holding_ = shared_from_this();
  reply_ = std::move(reply);
  body_unread_ = body_unread;
  close_after_reply_ = body_unread || !request_keep_alive_ || draining_;
  streaming_ = false;
  watch_client();
  pump();
}

void Connection::pump() {
  while (state_ == State::kReplying && !writing_ && reply_) {
    waiting_ = false;
    ReplyStep step;
    try {
      step = reply_->next();
    } catch (...) {
      step.kind = ReplyStep::Kind::kCut;
    }
    switch (step.kind) {
      case ReplyStep::Kind::kWait:
        waiting_ = true;
        return;
      case ReplyStep::Kind::kResponse:
        if (streaming_) {
          close();
          return;
        }
        write_response(std::move(step.response));
        return;
      case ReplyStep::Kind::kHead:
        if (streaming_) {
          close();
          return;
        }
        write_head(std::move(step.response));
        return;
      case ReplyStep::Kind::kChunk:
        if (step.bytes.empty()) continue;
        write_bytes(std::move(step.bytes), false);
        return;
      case ReplyStep::Kind::kEnd:
        write_bytes(std::move(step.bytes), true);
        return;
      case ReplyStep::Kind::kCut:
        close();
        return;
    }
  }
}

void Connection::write_response(HttpResponse response) {
  response.keep_alive(!close_after_reply_);
  response.prepare_payload();
  out_response_ = std::make_shared<HttpResponse>(std::move(response));
  out_serializer_ = std::make_shared<http::response_serializer<http::string_body>>(*out_response_);
  write_response_part();
}

void Connection::write_response_part() {
  writing_ = true;
  arm(write_timer_, limits_.write_timeout);
  http::async_write_some(
      socket_, *out_serializer_, [self = shared_from_this()](error_code error, size_t) {
        if (!error && self->state_ == State::kReplying && !self->out_serializer_->is_done()) {
          self->write_response_part();  // the client took some: a new deadline
          return;
        }
        self->on_written(error, true);
      });
}

void Connection::write_head(HttpResponse response) {
  if (chunked_) {
    response.chunked(true);
  } else {
    close_after_reply_ = true;  // HTTP/1.0: the body ends where the connection does
  }
  response.keep_alive(!close_after_reply_);
  response.body().clear();
  out_response_ = std::make_shared<HttpResponse>(std::move(response));
  out_serializer_ = std::make_shared<http::response_serializer<http::string_body>>(*out_response_);
  streaming_ = true;
  writing_ = true;
  arm(write_timer_, limits_.write_timeout);
  http::async_write_header(
      socket_, *out_serializer_,
      [self = shared_from_this()](error_code error, size_t) { self->on_written(error, false); });
}

void Connection::write_bytes(std::string bytes, bool last) {
  if (!streaming_) {
    close();  // a body without a head: the reply broke its contract
    return;
  }
  if (chunked_) {
    out_ = bytes.empty() ? std::string() : chunk(bytes);
    if (last) out_ += "0\r\n\r\n";
  } else {
    out_ = std::move(bytes);
  }
  writing_ = true;
  arm(write_timer_, limits_.write_timeout);
  net::async_write(socket_, net::buffer(out_),
                   [self = shared_from_this(), last](error_code error, size_t) {
                     self->on_written(error, last);
                   });
}

void Connection::on_written(error_code error, bool reply_done) {
  write_timer_.cancel();
  writing_ = false;
  if (state_ != State::kReplying) return;
  if (error) {
    close();
    return;
  }
  if (!reply_done) {
    if (client_gone_) {
      close();
      return;
    }
    pump();
    return;
  }
  out_response_.reset();
  out_serializer_.reset();
  end_reply(true);
  if (close_after_reply_ || client_gone_) {
    linger();
    return;
  }
  state_ = State::kIdle;
  if (watching_) {
    // The read that watched the client becomes the wait for the next request once it ends.
    error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  read_next();
}

void Connection::watch_client() {
  if (watching_ || body_unread_ || state_ != State::kReplying) return;
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0) return;  // pipelined requests fill the buffer: read no more until answered
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(std::min(room, kReadSize)),
                          [self = shared_from_this()](error_code error, size_t n) {
                            self->watching_ = false;
                            self->buffer_.commit(n);
                            if (self->state_ == State::kLingering) {
                              self->discard();  // linger() cancelled this read
                              return;
                            }
                            if (self->state_ == State::kIdle) {
                              self->read_next();  // the reply ended while this read was pending
                              return;
                            }
                            if (self->state_ != State::kReplying) return;
                            if (error) {
                              // The client went away before its answer. A write in flight may
                              // still have handed the answer's last bytes over (its completion
                              // can be queued behind this on another thread): on_written decides.
                              self->client_gone_ = true;
                              if (!self->writing_) self->close();
                              return;
                            }
                            self->watch_client();
                          });
}

void Connection::end_reply(bool delivered) {
  std::shared_ptr<Reply> reply = std::move(reply_);
  waiting_ = false;
  if (reply) reply->finished(delivered);
  // Every caller runs in a handler that holds the connection too.
  holding_.reset();
}

void Connection::linger() {
  state_ = State::kLingering;
  error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  if (!body_unread_ && buffer_.size() == 0) {
    close();
    return;
  }
  lingered_bytes_ = 0;
  arm(read_timer_, kLingerTime);
  if (watching_) {
    socket_.cancel(ignored);  // the read that watched the client ends and calls discard()
    return;
  }
  discard();
}

void Connection::discard() {
  buffer_.consume(buffer_.size());
  socket_.async_read_some(buffer_.prepare(kReadSize),
                          [self = shared_from_this()](error_code error, size_t n) {
                            if (self->state_ != State::kLingering) return;
                            self->lingered_bytes_ += n;
                            if (error || self->lingered_bytes_ > kLingerBytes) {
                              self->close();
                              return;
                            }
                            self->discard();
                          });
}

void Connection::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  arrival_.reset();
  read_timer_.cancel();
  write_timer_.cancel();
  error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  end_reply(false);
}

}  // namespace voxd::server
