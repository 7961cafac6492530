#!/bin/bash
cd /app
sqlite3 -header -csv shop.db "select customer, printf('%.2f', sum(amount)) as total from orders
  where status = 'shipped' group by customer order by sum(amount) desc, customer" > report.csv
