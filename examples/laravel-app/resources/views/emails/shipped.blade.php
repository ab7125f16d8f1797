<p>Hello {{ $customer }}, your order is on its way.</p>
